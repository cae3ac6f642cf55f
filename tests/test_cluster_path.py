"""The cluster path, on one machine: a multi-node Ray cluster (a head that offers no CPUs to work
and two one-CPU worker nodes, tests/multinode.py) with an S3-compatible server on 127.0.0.1 as the
only storage the nodes share. Every run here is the user's command (``iclr-ray ... --address``, as
``ray job submit`` starts it), started from a directory that is deleted afterwards, so nothing can
be read back from a driver's local ``runs/``.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from iclr_ray.runtime import free_port

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _line(proc: subprocess.Popen, timeout: float) -> dict:
    """The next JSON line the cluster process prints, within ``timeout`` seconds."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise TimeoutError(f"the cluster process said nothing within {timeout:.0f} s")
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"the cluster process ended (exit {proc.wait(timeout=10)})")
    return json.loads(line)


class MultiNode:
    def __init__(self, proc: subprocess.Popen, address: str, env: dict):
        self.proc, self.address, self.env = proc, address, env

    def command(self, line: str, timeout: float = 120) -> dict:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return _line(self.proc, timeout)

    def cli(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """``iclr-ray ARGS`` (``run`` and ``sweep`` with ``--address <cluster>``) from a fresh
        directory, deleted when it ends."""
        workdir = Path(tempfile.mkdtemp(prefix="driver"))
        address = ["--address", self.address] if args[0] in ("run", "sweep") else []
        try:
            res = subprocess.run([sys.executable, "-m", "iclr_ray", *args, *address],
                                 capture_output=True, text=True, timeout=timeout, env=self.env, cwd=workdir)
            assert not (workdir / "runs").exists(), "the driver wrote a local runs/"
            return res
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def multinode(s3_server, tmp_path_factory):
    dashboard = free_port()
    env = {**os.environ, **s3_server.env, "RAY_API_SERVER_ADDRESS": f"http://127.0.0.1:{dashboard}",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           # node-local copies of checkpoints read from S3: this module's own, so a copy left by
           # another run never stands in for a download
           "ICLR_RAY_STORAGE_CACHE": str(tmp_path_factory.mktemp("node_cache"))}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "multinode.py"), str(dashboard)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True,
                            cwd=tmp_path_factory.mktemp("multinode"))
    try:
        info = _line(proc, 180)
        yield MultiNode(proc, info["address"], env)
    finally:
        try:
            proc.stdin.close()
            proc.wait(timeout=60)
        except (subprocess.TimeoutExpired, OSError):
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever the cluster left in its process group
        except ProcessLookupError:
            pass


def _check_run(s3, uri: str) -> list[str]:
    keys = s3.keys(uri)
    for name in ("config.yaml", "metrics.jsonl", "result.json", "report.md"):
        assert name in keys, f"{name} missing from {uri}: {keys[:20]}"
    assert any(k.startswith("plots/") and k.endswith(".png") for k in keys), keys
    return keys


def test_tasks_only_study_writes_its_run_to_s3(multinode, s3_server):
    uri = s3_server.bucket("tasks") + "/runs/coord_sketch"
    res = multinode.cli("run", "coord_sketch", "--preset", "smoke", "--out", uri)
    assert res.returncode == 0, res.stderr[-3000:]
    _check_run(s3_server, uri)
    result = json.loads(s3_server.client().get_object(Bucket="tasks", Key="runs/coord_sketch/result.json")["Body"]
                        .read())
    assert result["env"]["cluster_cpus"] == 2  # the two worker nodes; the head offers none

    # read back from the bucket alone: the claims recomputed, the report and figures redrawn
    s3_server.client().delete_object(Bucket="tasks", Key="runs/coord_sketch/report.md")
    again = multinode.cli("report", uri)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "report.md" in s3_server.keys(uri)


def test_train_and_tune_study_keeps_checkpoints_in_s3(multinode, s3_server):
    uri = s3_server.bucket("train") + "/runs/sft"
    res = multinode.cli("run", "sft_recipe", "--preset", "smoke", "--out", uri)
    assert res.returncode == 0, res.stderr[-3000:]
    keys = _check_run(s3_server, uri)
    trials = {k.split("/")[2] for k in keys if k.startswith("tune/recipe/sft_trial")}
    assert len(trials) == 2, trials  # the smoke's two grid trials
    for trial in trials:
        assert f"tune/recipe/{trial}/final.json" in keys
        assert f"tune/recipe/{trial}/train/steps.jsonl" in keys
        assert any(k.startswith(f"tune/recipe/{trial}/train/checkpoint_") and k.endswith("model/config.json")
                   for k in keys), f"no Hugging Face checkpoint of {trial} in the bucket"
    result = json.loads(s3_server.client().get_object(Bucket="train", Key="runs/sft/result.json")["Body"].read())
    finished = [t for t in result["metrics"]["trials"] if t["finished"]]
    assert len(finished) == 2 and all(t["curve"] for t in finished)


def test_a_model_folder_reaches_tasks_on_other_nodes_through_the_bucket(multinode, s3_server):
    """igcg builds its tiny model once into the run's storage and every optimisation task (on the
    worker nodes: the head offers no CPU) loads it from there: nothing is handed over by local path."""
    uri = s3_server.bucket("model") + "/runs/igcg"
    res = multinode.cli("run", "igcg", "--preset", "smoke", "--out", uri)
    assert res.returncode == 0, res.stderr[-3000:]
    keys = _check_run(s3_server, uri)
    assert "base_model/config.json" in keys and any(k.startswith("base_model/model") for k in keys), keys
    result = json.loads(s3_server.client().get_object(Bucket="model", Key="runs/igcg/result.json")["Body"].read())
    assert result["claims"] or result["checks"]


def test_train_run_survives_losing_a_worker_node(multinode, s3_server):
    """Both Train workers on their own node; one node is removed (its processes killed) after the
    first checkpoint reached the bucket and a fresh node joins: Ray Train restarts the group from
    the last checkpoint in S3 and ends on the loss of an uninterrupted run."""
    root = s3_server.bucket("nodes")
    driver = [sys.executable, str(REPO / "tests" / "cluster_train.py"), root]
    env = {**multinode.env, "RAY_ADDRESS": multinode.address}
    ref = subprocess.run([*driver, "reference"], capture_output=True, text=True, timeout=300, env=env)
    assert ref.returncode == 0, ref.stderr[-3000:]
    reference = json.loads(ref.stdout.strip().splitlines()[-1])
    assert reference["resumed_from"] == 0

    run = subprocess.Popen([*driver, "interrupted"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=env)
    try:
        # a checkpoint's files reach the bucket before Ray Train's controller has taken its report: a
        # node lost in between restarts from scratch (CI saw resumed_from 0). A worker reports a
        # checkpoint and only then trains on to the next, so once a second checkpoint's files appear
        # the first is registered.
        deadline, seen = time.monotonic() + 240, set()
        while len(seen) < 2:
            assert run.poll() is None, run.stderr.read()[-3000:]
            assert time.monotonic() < deadline, f"not two checkpoints in the bucket within 240 s: {seen}"
            time.sleep(0.2)
            seen |= {k.split("/")[1] for k in s3_server.keys(root) if k.startswith("interrupted/checkpoint_")}
        multinode.command("remove 1")
        multinode.command("add")
        out, err = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err[-3000:]
    got = json.loads(out.strip().splitlines()[-1])
    assert got["resumed_from"] > 0, got  # restarted from a checkpoint, not from scratch
    assert got["step"] == reference["step"]
    assert got["loss"] == pytest.approx(reference["loss"], rel=1e-5)


def test_sweep_killed_mid_run_resumes_from_the_bucket(multinode, s3_server):
    uri = s3_server.bucket("sweep") + "/sweeps/sft"
    args = ["sweep", "sft_recipe", "--preset", "smoke", "--space", str(REPO / "tune_spaces" / "sft_smoke.yaml"),
            "--set", "sft.num_workers=1", "--scheduler", "fifo"]
    workdir = Path(tempfile.mkdtemp(prefix="driver"))
    driver = subprocess.Popen([sys.executable, "-m", "iclr_ray", *args, "--out", uri, "--address", multinode.address],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=multinode.env,
                              cwd=workdir, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not (finals := [k for k in s3_server.keys(uri) if k.endswith("/final.json")]):
            assert driver.poll() is None, driver.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no trial finished within 300 s"
            time.sleep(0.5)
        os.killpg(driver.pid, signal.SIGKILL)  # the driver dies mid-sweep, as a lost head or ssh would
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        shutil.rmtree(workdir, ignore_errors=True)
    assert "result.json" not in s3_server.keys(uri)
    bucket, prefix = "sweep", "sweeps/sft/"
    before = {k: s3_server.client().head_object(Bucket=bucket, Key=prefix + k)["LastModified"] for k in finals}

    res = multinode.cli(*args, "--resume", uri)
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads(s3_server.client().get_object(Bucket=bucket, Key=prefix + "result.json")["Body"].read())
    assert result["metrics"]["trials"] == 3 and result["metrics"]["finished"] == 3
    # a trial that had finished is not trained again: its final record is the one written before
    # (a rerun would write the same scores again, later)
    for k, written in before.items():
        assert s3_server.client().head_object(Bucket=bucket, Key=prefix + k)["LastModified"] == written
    assert len([k for k in s3_server.keys(uri) if k.endswith("/final.json")]) == 3
