"""Storage locations (iclr_ray/storage.py) and the run directory over them: local paths and an
S3-compatible server on 127.0.0.1, through the same calls."""
from __future__ import annotations

import os

import pytest

from iclr_ray import storage
from iclr_ray.results import RunDir, RunDirError


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    return s3_server


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    """A fresh folder: a local path, or a prefix in a new bucket of the S3 server."""
    if request.param == "local":
        return str(tmp_path / "store")
    s3 = request.getfixturevalue("s3_env")
    return s3.bucket(f"b{abs(hash(request.node.name)) % 10**8}") + "/store"


def test_locations_parse():
    assert not storage.is_remote("runs/x") and not storage.is_remote("file:///tmp/x")
    assert storage.is_remote("s3://b/k") and storage.is_remote("gs://b/k")
    assert storage.local_path("file:///tmp/x") == storage.local_path("/tmp/x")
    assert storage.join("s3://b/k/", "a", "/b") == "s3://b/k/a/b"
    assert storage.join("/tmp", "a", "b") == "/tmp/a/b"
    assert storage.normalise("s3://b/k/") == "s3://b/k"


def test_files_round_trip(root, tmp_path):
    assert not storage.exists(root) and list(storage.list_files(root)) == []
    storage.write_text(storage.join(root, "a.txt"), "one")
    storage.write_bytes(storage.join(root, "sub", "b.bin"), b"\x00\x01")
    assert storage.read_text(storage.join(root, "a.txt")) == "one"
    assert storage.is_file(storage.join(root, "sub", "b.bin")) and not storage.is_file(storage.join(root, "sub"))
    assert list(storage.list_files(root)) == ["a.txt", "sub/b.bin"]
    storage.write_text(storage.join(root, "a.txt"), "two")  # replaced whole
    assert storage.read_text(storage.join(root, "a.txt")) == "two"

    local = storage.download_dir(root, tmp_path / "down")
    assert (local / "sub" / "b.bin").read_bytes() == b"\x00\x01"
    storage.upload_dir(local, storage.join(root, "copy"))
    assert list(storage.list_files(storage.join(root, "copy"))) == ["a.txt", "sub/b.bin"]
    storage.delete(storage.join(root, "copy"))
    storage.delete(storage.join(root, "nothing-there"))
    assert list(storage.list_files(root)) == ["a.txt", "sub/b.bin"]
    if not storage.is_remote(root):  # local writes leave no temporary files behind
        assert sorted(os.listdir(root)) == ["a.txt", "sub"]


def test_local_copy_downloads_once_per_node(s3_env, tmp_path, monkeypatch):
    monkeypatch.setenv(storage.CACHE_ENV, str(tmp_path / "cache"))
    uri = s3_env.bucket("copies") + "/ckpt/model"
    storage.write_text(storage.join(uri, "config.json"), "{}")
    first = storage.local_copy(uri)
    assert (first / "config.json").read_text() == "{}" and first.is_relative_to(tmp_path / "cache")
    storage.write_text(storage.join(uri, "config.json"), '{"changed": 1}')
    assert storage.local_copy(uri) == first and (first / "config.json").read_text() == "{}"  # cached
    assert storage.local_copy(str(tmp_path)) == tmp_path  # a local folder is used where it is
    with pytest.raises(FileNotFoundError):
        storage.local_copy(s3_env.bucket("empty") + "/nothing")


def test_uri_of_names_pyarrow_filesystems(s3_env):
    fs, path = storage.filesystem("s3://bkt/a/b")
    assert path == "bkt/a/b" and storage.uri_of(fs, path) == "s3://bkt/a/b"
    local, p = storage.filesystem("/tmp/x")
    assert storage.uri_of(local, p) == "/tmp/x"


def test_run_dir_on_either_storage(root):
    rd = RunDir(root).create()
    rd.write_config("seed: 0\n")
    rd.log({"step": 1, "loss": 0.5})
    rd.log({"step": 2, "loss": float("nan")})
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1])
    rd.save_plots({"curve": fig})
    result = {"study": "coord_sketch", "preset": "smoke", "config": {}, "metrics": {}, "claims": [], "env": {},
              "seconds": 1.0}
    rd.write_result(result)
    rd.write_report(result, "title")
    assert set(storage.list_files(root)) == {"config.yaml", "metrics.jsonl", "plots/curve.png", "result.json",
                                             "report.md"}

    again = RunDir(root)  # another process reading the run: from the storage, not the writer's copy
    assert again.read_result()["study"] == "coord_sketch"
    assert again.read_metrics() == [{"step": 1, "loss": 0.5}, {"step": 2, "loss": None}]
    assert again.read_text("config.yaml") == "seed: 0\n" and again.read_text("absent") is None
    again.pull()
    assert (again.plots / "curve.png").is_file() and "![curve](plots/curve.png)" in (again.path / "report.md").read_text()
    again.clear_plots()
    assert not any(name.startswith("plots/") for name in storage.list_files(root))
    with pytest.raises(RunDirError, match="already holds a finished run"):
        RunDir(root).create()



def test_no_study_hands_a_local_path_between_processes():
    """Every study may run with ``--out s3://``, so it reaches its run directory and its checkpoints
    only as locations (``ctx.run_dir.storage``, ``checkpoint_location``): ``run_dir.path`` is the
    driver's staging folder and ``checkpoint.path`` a path inside the storage's filesystem, both
    meaningless to a process on another node."""
    import re
    from pathlib import Path

    from iclr_ray import studies

    root = Path(studies.__file__).parent
    banned = re.compile(r"run_dir\.path|checkpoint\.path\b")
    offenders = [f"{src.relative_to(root)}:{n}" for e in studies.REGISTRY.values()
                 for src in sorted((root / e.id).glob("*.py"))
                 for n, line in enumerate(src.read_text().splitlines(), 1) if banned.search(line)]
    assert not offenders, offenders
