"""Where a run meets Ray: the connection, the hardware, seeding, progress and the run context.

Embedded by default: with no address, :func:`connect` starts a local Ray on this machine. With
``--address`` or ``RAY_ADDRESS`` (which ``ray job submit`` sets for the driver) it joins that
cluster. A Ray already initialised in this process (tests, notebooks) is reused and left running.
"""
from __future__ import annotations

import contextlib
import os
import platform
import random
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from .config import ConfigError
from .results import RunDir


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast (one line) when a Ray address does not answer, instead of Ray's long retries."""
    if address == "auto" or address.startswith("ray://"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return
    except ValueError:
        raise ConfigError(f"bad Ray address {address!r}: expected host:port") from None
    except OSError as exc:
        raise ConfigError(f"cannot reach Ray at {address}: {exc.strerror or exc}") from None


def resolve_address(address: str | None = None) -> str | None:
    """``--address``, else ``RAY_ADDRESS``, else None (embedded local Ray); checked to answer."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        check_reachable(address)
    return address


@contextlib.contextmanager
def connect(address: str | None = None, quiet: bool = True) -> Iterator[dict[str, Any]]:
    """Connect to Ray for the duration of a run; yields the cluster's resources.

    ``address`` is the one :func:`resolve_address` returned (None: embedded local Ray)."""
    import ray

    owned = not ray.is_initialized()
    if owned:
        # Embedded Ray: one torch/BLAS thread per worker process; on small machines threads
        # fighting over cores made small layers ~45x slower (shared/MEASURED.md). On a cluster
        # (and inside `ray job submit`, whose runtime env may not be merged with another) the
        # cluster's or the job's runtime env decides (clusters/runtime_env.yaml).
        # Train V2's controller polls every 2 s by default, blocking each report (MEASURED.md).
        # Train V2 also starts a preemption watcher per run, a process that polls for spot-node
        # preemption notices; an embedded Ray on one machine gets none, so it is left out.
        env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.1"),
               "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": os.environ.get("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")}
        dashboard: dict[str, Any] = {}
        if not address:
            # Tune frees a stopped trial's placement groups through the State API, which finds
            # the dashboard by RAY_API_SERVER_ADDRESS; without it they leak and the next trial
            # hangs on worker start-up (shared/MEASURED.md). So: the dashboard on a known port.
            port = free_port()
            env["RAY_API_SERVER_ADDRESS"] = os.environ["RAY_API_SERVER_ADDRESS"] = f"http://127.0.0.1:{port}"
            dashboard = {"include_dashboard": True, "dashboard_host": "127.0.0.1", "dashboard_port": port}
        # address="local" always starts a new embedded Ray: plain ray.init() would attach to
        # whatever cluster /tmp/ray/ray_current_cluster names, even a dead one.
        ray.init(address=address or "local", runtime_env=None if address else {"env_vars": env},
                 log_to_driver=not quiet, configure_logging=False, **dashboard)
    try:
        yield ray.cluster_resources()
    finally:
        if owned:
            ray.shutdown()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hardware() -> dict[str, Any]:
    """What this process runs on. GPU is detected, never assumed."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = bool(torch.cuda.is_available())
        if info["cuda"]:
            info["gpus"] = torch.cuda.device_count()
            info["gpu_name"] = torch.cuda.get_device_name(0)
    except ImportError:
        info["torch"] = None
        info["cuda"] = False
    try:
        import ray

        info["ray"] = ray.__version__
    except ImportError:
        info["ray"] = None
    info["numpy"] = np.__version__
    return info


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:
        pass


class Progress:
    """A counter that prints ``desc done/total elapsed eta`` lines to stderr as work completes.

    Lines, not a redrawn bar: they read the same in a terminal, a CI log and ``ray job logs``.
    """

    def __init__(self, total: int, desc: str, stream=None, min_interval: float = 1.0):
        self.total, self.desc, self.done = total, desc, 0
        self.stream = stream or sys.stderr
        self.start = self.last = time.monotonic()
        self.min_interval = min_interval

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.done >= self.total or now - self.last >= self.min_interval:
            self.last = now
            elapsed = now - self.start
            eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
            print(f"  {self.desc}: {self.done}/{self.total}  {elapsed:.0f}s elapsed, ~{eta:.0f}s left",
                  file=self.stream, flush=True)


@dataclass
class RunContext:
    """What a study's ``run(cfg, ctx)`` gets: the run directory, logging, plots, progress."""

    run_dir: RunDir
    preset: str
    resources: dict[str, Any] = field(default_factory=dict)
    inputs: Any = None

    def log(self, **record: Any) -> None:
        self.run_dir.log(record)

    def save_plot(self, fig: Any, name: str) -> None:
        self.run_dir.save_plot(fig, name)

    def progress(self, total: int, desc: str) -> Progress:
        return Progress(total, desc)

    def wait_all(self, refs: list, desc: str) -> list:
        """``ray.get`` a list of object refs in order, printing progress as they finish."""
        import ray

        bar = self.progress(len(refs), desc)
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=min(len(pending), max(1, len(refs) // 20)))
            bar.update(len(ready))
        return ray.get(refs)
