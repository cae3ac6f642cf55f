"""The device check that needs no GPU: the model on ``meta`` stands in for a model on a GPU, and
every op is checked as CUDA checks it.

On its own, ``meta`` is lenient: an embedding lookup, a matmul or a ``linear`` with one CPU and
one meta tensor runs (measured: they return meta or even CPU tensors), where CUDA raises
"Expected all tensors to be on the same device". :class:`StrictDevices` restores CUDA's rule:
an op whose tensors sit on two devices raises, CPU scalars (0-dim) and the index tensors of
indexing aside, as CUDA allows those.

A meta tensor has no values. A yes/no read of one (``if mask.all():``, as transformers checks its
packed-sequence masks) answers False, so the check goes on down the general branch; any other read
back to the host (``.item()``, ``.cpu()``, ``.numpy()``), or an op meta has no kernel for (sparse
products, ``torch.unique``), ends the check as a pass: the code got there with every tensor on the
model's device, and what follows is not checked.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

HOST_READS = ("Cannot copy out of meta tensor", "cannot be called on meta tensors", "Tensor.item() cannot be called",
              "not supported for tensor subclasses", "tensor with unallocated storage",
              # where meta cannot compute at all: no meta kernel (sparse products, torch.unique's
              # value-dependent shape)
              "attempted to run this operator with Meta tensors", "from the 'Meta' backend",
              "from the 'SparseMeta' backend")
MOVES = {"_to_copy", "copy_", "lift_fresh", "lift_fresh_copy", "_local_scalar_dense", "detach", "alias", "set_"}
"""ops that legitimately take tensors on two devices: moves"""
INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}
"""ops whose index tensors (their second argument) CUDA takes from the CPU; the rest must match"""


class DeviceMismatch(RuntimeError):
    pass


YES_NO_READS = 64
"""yes/no reads answered False before the check ends (a loop that waits for a meta tensor to say
True, such as generate's "all sequences finished", would otherwise never end)"""


class StrictDevices(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (func.overloadpacket.__name__ in ("is_nonzero", "_local_scalar_dense", "item") and args
                and isinstance(args[0], torch.Tensor) and args[0].device.type == "meta"
                and args[0].dtype == torch.bool):
            self.reads += 1
            if self.reads > YES_NO_READS:
                raise RuntimeError("Tensor.item() cannot be called on meta tensors (the device check's last "
                                   "yes/no read)")
            return False
        name = func.overloadpacket.__name__
        if name not in MOVES:
            checked = (args[:1] + args[2:], kwargs) if name in INDEXING else (args, kwargs)
            devices = {t.device.type for t in tree_flatten(checked)[0]
                       if isinstance(t, torch.Tensor) and not (t.dim() == 0 and t.device.type == "cpu")}
            if len(devices) > 1:
                raise DeviceMismatch(f"Expected all tensors to be on the same device: {func} got "
                                     f"{', '.join(sorted(devices))}")
        return func(*args, **kwargs)


def on_device(fn: Callable[[], Any]) -> Any:
    """``fn()`` under :class:`StrictDevices`: its result, or None when it stopped at its first
    read back to the host; a device mismatch (or any other error) propagates."""
    try:
        with StrictDevices():
            return fn()
    except DeviceMismatch:
        raise
    except (RuntimeError, NotImplementedError) as exc:
        if any(h in str(exc) for h in HOST_READS):
            return None
        raise
