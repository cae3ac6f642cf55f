"""The device check that needs no GPU: the model on ``meta`` stands in for a model on a GPU, and
every op is checked as CUDA checks it.

On its own, ``meta`` is lenient: an embedding lookup, a matmul or a ``linear`` with one CPU and
one meta tensor runs (measured: they return meta or even CPU tensors), where CUDA raises
"Expected all tensors to be on the same device". :class:`StrictDevices` restores CUDA's rule:
an op whose tensors sit on two devices raises, CPU scalars (0-dim) and the index tensors of
indexing aside, as CUDA allows those; so does a random draw whose generator sits on another device
than the tensor it fills.

A meta tensor has no values. A yes/no read of one (``if mask.all():``, as transformers checks its
packed-sequence masks) answers False, so the check goes on down the general branch; any other read
back to the host (``.item()``, ``.cpu()``), or an op meta has no kernel for (sparse products,
``torch.unique``), ends the check as a pass: the code got there with every tensor on the model's
device, and what follows is not checked. With ``host_values=True`` a read back to the host answers
zeros of the right shape and dtype instead, so the check goes on through the host-side code after
it (scoring, matching, the next batch) up to ``HOST_READS_LIMIT`` reads. ``.numpy()`` on a meta
tensor raises as it does on a GPU tensor ("Use Tensor.cpu()"): that is a finding, not a read.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

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


def _devices(values):
    """The device types of the tensors among ``values`` (lists and tuples looked into), CPU scalars
    (0-dim) left out: CUDA takes those beside its own tensors."""
    for v in values:
        if isinstance(v, torch.Tensor):
            kind = v.device.type
            if kind != "cpu" or v.dim():
                yield kind
        elif isinstance(v, (list, tuple)):
            yield from _devices(v)


class DeviceMismatch(RuntimeError):
    pass


HOST_READS_LIMIT = 10_000
"""host reads (yes/no reads included) answered with zeros (``host_values=True``) before the check
ends: a bound for loops that wait on a value"""
YES_NO_READS = 64
"""yes/no reads answered False before the check ends (a loop that waits for a meta tensor to say
True, such as generate's "all sequences finished", would otherwise never end)"""


class StrictDevices(TorchDispatchMode):
    def __init__(self, host_values: bool = False):
        super().__init__()
        self.reads = 0
        self.host_values = host_values
        self.host_reads = 0

    def _host_value(self, name, args, kwargs):
        """zeros where a meta tensor is read back to the CPU (``host_values``), else None"""
        src = args[1] if name == "copy_" else args[0] if args else None
        if not (self.host_values and isinstance(src, torch.Tensor) and src.device.type == "meta"):
            return None
        if name in ("allclose", "equal") and any(t.device.type != "meta" for t in args[:2]):
            return None  # a comparison across devices: the device rule below raises
        if name == "_to_copy":
            target = kwargs.get("device")
            if target is None or torch.device(target).type != "cpu":
                return None
            out = torch.zeros(src.shape, dtype=kwargs.get("dtype") or src.dtype)
        elif name == "copy_" and args[0].device.type == "cpu":
            out = args[0].zero_()
        elif name == "_local_scalar_dense":
            out = False if src.dtype == torch.bool else 0
        elif name in ("allclose", "equal"):  # a comparison read on the host: zeros equal zeros
            out = True
        else:
            return None
        self.host_reads += 1
        if self.host_reads > HOST_READS_LIMIT:
            raise RuntimeError("Cannot copy out of meta tensor (the device check's last host read)")
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__  # once per op: this runs for every op of the check
        if (name in ("is_nonzero", "_local_scalar_dense", "item") and args
                and isinstance(args[0], torch.Tensor) and args[0].device.type == "meta"
                and args[0].dtype == torch.bool):
            self.reads += 1
            if self.reads > (HOST_READS_LIMIT if self.host_values else YES_NO_READS):
                raise RuntimeError("Tensor.item() cannot be called on meta tensors (the device check's last "
                                   "yes/no read)")
            return False
        value = self._host_value(name, args, kwargs) if self.host_values else None
        if value is not None:
            return value
        if name not in MOVES:
            checked = (args[:1] + args[2:], kwargs) if name in INDEXING else (args, kwargs)
            devices = set(_devices(checked[0]))
            if checked[1]:
                devices.update(_devices(checked[1].values()))
            if kwargs.get("generator") is not None:  # CUDA draws only with a generator of its own device
                devices |= {kwargs["generator"].device.type}
                if kwargs.get("device") is not None:
                    devices |= {torch.device(kwargs["device"]).type}
            if len(devices) > 1:
                raise DeviceMismatch(f"Expected all tensors to be on the same device: {func} got "
                                     f"{', '.join(sorted(devices))}")
        return func(*args, **kwargs)


def on_device(fn: Callable[[], Any], host_values: bool = False) -> Any:
    """``fn()`` under :class:`StrictDevices`: its result, or None when it stopped at its first
    read back to the host (``host_values``: at its last); a device mismatch (or any other error)
    propagates."""
    try:
        with StrictDevices(host_values):
            return fn()
    except DeviceMismatch:
        raise
    except (RuntimeError, NotImplementedError) as exc:
        if any(h in str(exc) for h in HOST_READS):
            return None
        raise
