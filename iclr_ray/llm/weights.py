"""One checkpoint format for trained weights: a safetensors file of the state dict, with a small
JSON of metadata beside it (``name.safetensors`` + ``name.json``).

Every Train recipe that saves weights of its own (rather than a Hugging Face or diffusers folder,
which are safetensors already) goes through :func:`save_engine_weights`: every rank calls it, under
ZeRO-3 the 16-bit weights are gathered from every rank's partition first (rank 0's own
``engine.module.state_dict()`` holds only empty placeholders there), and rank 0 writes. Loading is
:func:`load_weights`: safetensors never unpickles, so a checkpoint cannot run code.

Tensors that share storage (tied embeddings) are written once; the file's header names the others
as aliases and :func:`load_weights` restores them. No Ray; the only I/O is the location, a path or
a URI (:mod:`iclr_ray.storage`)."""
from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from .. import storage

FORMAT = "iclr_ray.weights/1"
_ALIASES = "aliases"


def state_bytes(state: Mapping[str, Any], meta: Mapping[str, Any] | None = None) -> bytes:
    """``state`` (name -> tensor) as the bytes of one safetensors file; tensors on any device are
    copied to the host, made contiguous; a tensor sharing storage with an earlier one is stored
    once and named in the header's aliases."""
    from safetensors.torch import save

    tensors: dict[str, Any] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    held: set[int] = set()  # storages a kept tensor already uses (safetensors refuses shared memory)
    for name, t in state.items():
        t = t.detach().cpu()
        ptr = t.untyped_storage().data_ptr()
        key = (ptr, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if ptr and key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        kept = t.contiguous()
        if ptr in held or kept.untyped_storage().nbytes() != kept.numel() * kept.element_size():
            kept = kept.clone()
        held.add(kept.untyped_storage().data_ptr())
        tensors[name] = kept
    header = {"format": FORMAT, _ALIASES: json.dumps(aliases)}
    header.update({k: json.dumps(v) for k, v in (meta or {}).items()})
    return save(tensors, metadata=header)


def state_from_bytes(data: bytes) -> dict[str, Any]:
    """The state dict of :func:`state_bytes`' bytes (aliases restored as the same tensor)."""
    from safetensors.torch import load

    state = load(data)
    for name, of in _header(data).get(_ALIASES, {}).items():
        state[name] = state[of]
    return state


def _header(data: bytes) -> dict[str, Any]:
    n = int.from_bytes(data[:8], "little")
    raw = json.loads(data[8:8 + n]).get("__metadata__", {}) or {}
    if raw.get("format") != FORMAT:
        return {}
    return {k: json.loads(v) for k, v in raw.items() if k != "format"}


def save_weights(state: Mapping[str, Any], location: str, meta: Mapping[str, Any] | None = None) -> str:
    """``state`` at ``location`` (``.../name.safetensors``, a path or a URI; written whole) and
    ``meta`` (JSON values) beside it as ``name.json``; returns the location."""
    if not str(location).endswith(".safetensors"):
        raise ValueError(f"a weights file ends in .safetensors: {location}")
    storage.write_bytes(location, state_bytes(state))
    info = {"format": FORMAT, "tensors": len(state), **(meta or {})}
    storage.write_text(meta_location(location), json.dumps(info, indent=1))
    return storage.normalise(location)


def meta_location(location: str) -> str:
    return str(location)[: -len(".safetensors")] + ".json"


def load_weights(location: str) -> dict[str, Any]:
    """The state dict saved at ``location`` by :func:`save_weights` (a path or a URI), on the CPU."""
    return state_from_bytes(storage.read_bytes(location))


def read_meta(location: str) -> dict[str, Any]:
    """The metadata written beside the weights at ``location``."""
    return json.loads(storage.read_text(meta_location(location)))


def gathered_state(engine, zero_stage: int) -> dict[str, Any] | None:
    """The whole model's state dict on rank 0 (None on the other ranks under ZeRO-3): under ZeRO-3
    the 16-bit weights gathered from every rank's partition (every rank must call this), below it
    the module's own (each rank holds every weight)."""
    if zero_stage == 3:
        # DeepSpeed's gather of a ZeRO-3 model (what engine.save_16bit_model writes): rank 0 gets
        # the whole state dict, the others an empty one
        state = engine._zero3_consolidated_16bit_state_dict()
        return state or None
    return engine.module.state_dict()


def save_engine_weights(engine, location: str, rank: int, zero_stage: int, meta: Mapping[str, Any] | None = None,
                        keep: Callable[[str], bool] | None = None) -> None:
    """Called on every rank: the trained model's weights (``keep``: the names to save, default
    all) written by rank 0 to ``location`` in the one format (:func:`save_weights`)."""
    state = gathered_state(engine, zero_stage)
    if rank != 0:
        return
    if state is None:
        raise RuntimeError("rank 0 received no gathered state dict from DeepSpeed")
    if keep is not None:
        state = {k: v for k, v in state.items() if keep(k)}
    save_weights(state, location, {"zero_stage": zero_stage, **(meta or {})})
