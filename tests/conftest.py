"""One Ray cluster per test session, started on first use and stopped at the end.

The cluster is a real ``ray start --head`` on 127.0.0.1 with the dashboard on (the job API and
the State API need it), ``--num-cpus=2``. Tests that need Ray connect this process to it with
the ``ray_cluster`` fixture; the ``ray job submit`` test submits to the same cluster. ``--block``
keeps the head's processes children of one process group, which teardown ends, so the session
never leaves Ray processes behind (``ray stop`` would stop every Ray on the host).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# Token authentication (on by default in Ray 2.60) must be on for every client of the cluster, and
# every process (the head, the nodes, drivers, `ray job`) needs the token: without a token file
# (a fresh machine has none) the session makes one up and hands it on through the environment.
os.environ.setdefault("RAY_AUTH_MODE", "token")
if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
        or (Path.home() / ".ray" / "auth_token").is_file()):
    import secrets

    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Status lines (iclr_ray.log) stay quiet in tests; a test that reads them sets the level itself.
os.environ.setdefault("ICLR_RAY_LOG_LEVEL", "WARNING")
# Ray replaces 127.0.0.1 with the host's own address unless told this; the tests' Ray (and all
# traffic to it) stays on loopback. Read when ray is first imported, so set before that.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# Train V2's controller polls workers every 2 s by default and each report waits for the next
# poll; the cluster's processes inherit the short poll.
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.1")
# No spot preemption on one machine: no preemption-watcher process per Train run (as runtime.py).
os.environ.setdefault("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")
# Every Ray Train worker of the session checks its recipe's train step and evaluation on a
# bfloat16 copy of its model on ``meta`` before the first step (llm.train.device_check): every
# study's smoke run is also its device test.
os.environ.setdefault("ICLR_RAY_DEVICE_CHECK", "1")
# Packaged pretrained models (llm/pretrained.py) are converted once into this cache, kept between
# sessions of this checkout and never in the user's own cache; the cluster's workers inherit it.
os.environ.setdefault("ICLR_RAY_MODEL_CACHE", str(REPO / ".pytest_cache" / "iclr_ray_models"))

from iclr_ray.runtime import free_port  # noqa: E402  (imports no Ray)


@dataclass
class Cluster:
    gcs_address: str
    dashboard_url: str
    env: dict


def _start_cluster(tmp: Path, temp_dir: str) -> tuple[subprocess.Popen, Cluster]:
    gcs_port, dash_port = free_port(), free_port()
    # Tune frees a stopped trial's placement groups through the State API, which finds the
    # dashboard by this variable; the cluster and this driver both need it.
    os.environ["RAY_API_SERVER_ADDRESS"] = f"http://127.0.0.1:{dash_port}"
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("RAY_ADDRESS", None)
    log = open(tmp / "ray_head.log", "w")
    proc = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
         f"--port={gcs_port}", "--num-cpus=2",
         # every other port free too: the defaults (52365 for the dashboard agent, ...) collide
         # with any other Ray on the host, such as an embedded `iclr-ray run` beside the tests
         f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
         f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
         f"--ray-client-server-port={free_port()}", "--num-gpus=0", "--include-dashboard=true",
         "--dashboard-host=127.0.0.1", f"--dashboard-port={dash_port}", "--disable-usage-stats",
         # its own temp dir: the default one's address file would send later plain ray.init()
         # calls on this host to this (by then dead) cluster
         f"--temp-dir={temp_dir}"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp,
    )
    cluster = Cluster(f"127.0.0.1:{gcs_port}", f"http://127.0.0.1:{dash_port}", env)
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited {proc.returncode}: {(tmp / 'ray_head.log').read_text()[-2000:]}")
        try:
            urllib.request.urlopen(f"{cluster.dashboard_url}/api/version", timeout=2)
            return proc, cluster
        except urllib.error.HTTPError:  # answering (401 without the auth token): it is up
            return proc, cluster
        except OSError:
            time.sleep(0.5)
    _stop(proc)
    raise RuntimeError("Ray head did not come up within 120 s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)  # Ray drains for up to 30 s; nothing here needs draining
        except subprocess.TimeoutExpired:
            pass
    try:  # anything the head left in its process group
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    """The session's Ray cluster, with this test process connected to it as a driver."""
    import ray

    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths live under it
    proc, cluster = _start_cluster(tmp_path_factory.mktemp("ray_head"), temp_dir)
    try:
        ray.init(address=cluster.gcs_address, log_to_driver=False, configure_logging=False)
        yield cluster
    finally:
        ray.shutdown()
        _stop(proc)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _offline_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``iclr-ray ARGS`` in a subprocess that cannot reach any Ray: RAY_ADDRESS points nowhere, so
    a CLI that tried to reach Ray would fail differently."""
    return subprocess.run([sys.executable, "-m", "iclr_ray", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "RAY_ADDRESS": "127.0.0.1:1", "HF_HUB_OFFLINE": "1"})


@pytest.fixture
def input_error(tmp_path, monkeypatch, capsys):
    """``input_error(study, ["a.b=v", ...], preset="smoke")`` runs
    ``iclr-ray run STUDY --preset PRESET --set ...``
    in this process, offline, with the two ways to Ray (``runtime.resolve_address``, which a run
    calls before anything else reaches Ray, and ``runtime.connect``) turned into test failures,
    and returns its error line, after checking the input contract: exit code 2, one line on
    stderr, and no run directory written. (In-process: a subprocess per case cost about 3.5 s of
    imports, over 100 cases; ``_offline_cli`` is the subprocess form.)"""
    import huggingface_hub.constants

    from iclr_ray import cli, runtime

    def no_ray(*_args, **_kwargs):
        raise AssertionError("the CLI reached for Ray before refusing its input")

    monkeypatch.setattr(runtime, "resolve_address", no_ray)
    monkeypatch.setattr(runtime, "connect", no_ray)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")

    def check(study: str, sets: list[str], preset: str = "smoke") -> str:
        out = tmp_path / "out"
        args = [x for s in sets for x in ("--set", s)]
        capsys.readouterr()
        try:
            code = cli.main(["run", study, "--preset", preset, "--out", str(out), *args])
        except SystemExit as exc:  # argparse's own errors
            code = exc.code
        err = capsys.readouterr().err
        assert code == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert not out.exists()
        return lines[0]

    return check


@pytest.fixture(scope="session")
def wait_serving():
    """``wait_serving(base_url)``: poll ``GET base_url/v1/models`` until a Serve app answers 200
    (up to ``timeout`` seconds; the test fails if it never does)."""
    def wait(base: str, timeout: float = 120) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/v1/models", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        pytest.fail(f"{base} did not start serving within {timeout:.0f} s")

    return wait


@dataclass
class S3:
    endpoint: str
    env: dict
    """AWS_* variables that send boto3 and pyarrow's S3 filesystem to this server"""

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
                            region_name=self.env["AWS_DEFAULT_REGION"])

    def bucket(self, name: str) -> str:
        """A new, empty bucket; returns ``s3://name``."""
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}"

    def keys(self, uri: str) -> list[str]:
        """Every object key under ``s3://bucket/prefix``, relative to the prefix."""
        bucket, _, prefix = uri[len("s3://"):].partition("/")
        prefix = prefix.rstrip("/") + "/" if prefix else ""
        out = []
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            out += [o["Key"][len(prefix):] for o in page.get("Contents", [])]
        return sorted(out)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """An S3-compatible server (moto's) on 127.0.0.1, stopped at the end of the session. Tests set
    ``s3_server.env`` in the environment of whatever should reach it."""
    import urllib.request

    port = free_port()
    log = open(tmp_path_factory.mktemp("s3") / "moto.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto server exited {proc.returncode}")
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("moto server did not answer within 60 s") from None
                time.sleep(0.3)
        yield S3(endpoint, {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                            "AWS_EC2_METADATA_DISABLED": "true"})
    finally:
        _stop(proc)
