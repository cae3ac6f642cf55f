"""Where a run keeps its files: a local path or a URI (``s3://``, ``gs://``, ``file://``, any
scheme ``pyarrow.fs`` reads, the filesystems Ray Train and Tune write their checkpoints through).

On a cluster every node sees the same storage only through a URI (or a filesystem mounted on
every node); a path on one node's disk handed to another is a defect. So whatever a trial or
task writes and the driver reads goes through these functions, or through the object store.

A location is a string: a plain path (local), or ``scheme://...``. ``file://`` URIs are local
paths. S3 endpoints and credentials come from the usual variables (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ...), which an S3-compatible server on 127.0.0.1 uses in the tests.

Whole files are written atomically: a local file through a temporary file and ``os.replace``, an
object by one PUT (an object store never shows a half-written object).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path, PurePosixPath
from typing import Iterator

LOCAL_SCHEMES = ("", "file")


def scheme(location: str | os.PathLike) -> str:
    text = str(location)
    return text.split("://", 1)[0] if "://" in text else ""


def is_remote(location: str | os.PathLike) -> bool:
    """Whether ``location`` is an object store or other non-local filesystem (``s3://``, ``gs://``)."""
    return scheme(location) not in LOCAL_SCHEMES


def local_path(location: str | os.PathLike) -> Path:
    """A local location (a path or ``file://``) as an absolute Path."""
    text = str(location)
    if scheme(text) == "file":
        text = text[len("file://"):]
    return Path(text).expanduser().absolute()


def normalise(location: str | os.PathLike) -> str:
    """A local location as an absolute path, a URI as given (without a trailing slash)."""
    return str(location).rstrip("/") if is_remote(location) else str(local_path(location))


def join(location: str | os.PathLike, *parts: str) -> str:
    """``location/part/...`` for paths and URIs alike."""
    if not is_remote(location):
        return str(local_path(location).joinpath(*parts))
    return "/".join([str(location).rstrip("/"), *(p.strip("/") for p in parts)])


def filesystem(location: str | os.PathLike):
    """(pyarrow filesystem, path inside it) of a location."""
    import pyarrow.fs as pafs

    if not is_remote(location):
        return pafs.LocalFileSystem(), str(local_path(location))
    try:
        return pafs.FileSystem.from_uri(str(location))
    except (pafs.ArrowInvalid, ValueError, OSError) as exc:
        from .config import ConfigError

        raise ConfigError(f"storage {location}: {str(exc).splitlines()[0]}") from None


def uri_of(fs, path: str) -> str:
    """The location of ``path`` inside a pyarrow filesystem (as Ray Train's ``Checkpoint.path``
    and Tune's ``Result.path`` give it, with ``.filesystem``) as one string."""
    kind = fs.type_name
    if kind == "local":
        return path
    prefix = {"s3": "s3", "gcs": "gs", "hdfs": "hdfs"}.get(kind)
    if prefix is None:  # fsspec-wrapped (PyFileSystem): the handler knows its protocol
        handler = getattr(fs, "handler", None)
        protocol = getattr(getattr(handler, "fs", None), "protocol", None)
        prefix = protocol[0] if isinstance(protocol, (tuple, list)) else protocol
    if not prefix:
        raise ValueError(f"cannot name a location in a {kind} filesystem")
    return f"{prefix}://{path.lstrip('/')}"


def exists(location: str | os.PathLike) -> bool:
    import pyarrow.fs as pafs

    fs, path = filesystem(location)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def is_file(location: str | os.PathLike) -> bool:
    import pyarrow.fs as pafs

    fs, path = filesystem(location)
    return fs.get_file_info(path).type == pafs.FileType.File


def read_bytes(location: str | os.PathLike) -> bytes:
    if not is_remote(location):
        return local_path(location).read_bytes()
    fs, path = filesystem(location)
    with fs.open_input_stream(path) as f:
        return f.read()


def read_text(location: str | os.PathLike) -> str:
    return read_bytes(location).decode()


def write_bytes(location: str | os.PathLike, data: bytes) -> None:
    """The whole file at once: atomically (a local temporary file renamed; one object PUT)."""
    if not is_remote(location):
        _atomic_local(local_path(location), data)
        return
    fs, path = filesystem(location)
    with fs.open_output_stream(path) as f:
        f.write(data)


def write_text(location: str | os.PathLike, text: str) -> None:
    write_bytes(location, text.encode())


def _atomic_local(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def delete(location: str | os.PathLike) -> None:
    """A file or a whole folder; nothing if it is not there."""
    import pyarrow.fs as pafs

    fs, path = filesystem(location)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.Directory:
        fs.delete_dir(path)
    elif info.type == pafs.FileType.File:
        fs.delete_file(path)


def list_files(location: str | os.PathLike) -> Iterator[str]:
    """Every file under a folder, as paths relative to it (sorted); none if it is not there."""
    import pyarrow.fs as pafs

    fs, path = filesystem(location)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return iter(())
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    root = PurePosixPath(path)
    return iter(sorted(str(PurePosixPath(i.path).relative_to(root)) for i in infos
                       if i.type == pafs.FileType.File))


def upload_dir(local: str | os.PathLike, location: str | os.PathLike, last: str | None = None) -> None:
    """A local folder's files to ``location`` (each file written whole; a file named ``last``, such
    as a model's ``config.json``, after all the others: its presence marks the folder complete)."""
    local = Path(local)
    files = sorted(p for p in local.rglob("*") if p.is_file())
    for f in sorted(files, key=lambda p: p.name == last):
        write_bytes(join(location, *f.relative_to(local).parts), f.read_bytes())


@contextlib.contextmanager
def folder_for(location: str | os.PathLike, last: str | None = None) -> Iterator[Path]:
    """A local folder for code that writes files (``save_pretrained``, a subprocess) whose result
    is kept at ``location``: the folder itself when it is local; for a URI, a temporary folder
    whose files are uploaded there when the block ends without an error (:func:`upload_dir`)."""
    if not is_remote(location):
        yield local_path(location)
        return
    with tempfile.TemporaryDirectory(prefix="iclr_ray_upload.") as tmp:
        yield Path(tmp)
        upload_dir(tmp, location, last=last)


def readable(source: str | os.PathLike) -> str:
    """What a library that opens files (``from_pretrained``) reads for ``source``: a URI as this
    node's local copy (:func:`local_copy`); a path or a hub id as given."""
    return str(local_copy(source)) if is_remote(source) else str(source)


def download_dir(location: str | os.PathLike, local: str | os.PathLike) -> Path:
    """The files under ``location`` into the local folder ``local`` (created)."""
    local = Path(local)
    local.mkdir(parents=True, exist_ok=True)
    for rel in list_files(location):
        _atomic_local(local.joinpath(*rel.split("/")), read_bytes(join(location, rel)))
    return local


CACHE_ENV = "ICLR_RAY_STORAGE_CACHE"


def cache_root() -> Path:
    """Where a node keeps local copies of remote folders (:func:`local_copy`):
    ``$ICLR_RAY_STORAGE_CACHE`` or ``~/.cache/iclr_ray/storage``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "iclr_ray" / "storage")


def local_copy(location: str | os.PathLike, timeout_s: float = 3600.0) -> Path:
    """A folder as a local path this process can hand to code that reads files (``from_pretrained``,
    ``np.load``): a local location as it is; a remote one downloaded once per node into
    :func:`cache_root`, keyed by its URI (checkpoints are written once, never changed in place),
    other processes on the node waiting for the first download instead of repeating it."""
    if not is_remote(location):
        return local_path(location)
    from filelock import FileLock

    key = hashlib.sha256(normalise(location).encode()).hexdigest()[:24]
    target = cache_root() / key
    done = target / ".complete"
    if done.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock", timeout=timeout_s):
        if not done.is_file():
            partial = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{key}."))
            try:
                download_dir(location, partial)
                if not any(partial.iterdir()):
                    raise FileNotFoundError(f"{location}: no files there")
                shutil.rmtree(target, ignore_errors=True)
                os.replace(partial, target)
            finally:
                shutil.rmtree(partial, ignore_errors=True)
            (target / ".complete").write_text(f"{normalise(location)}\n{time.time():.0f}\n")
    return target
