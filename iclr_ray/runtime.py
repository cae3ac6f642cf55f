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
import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from . import log as logs
from .config import ConfigError
from .results import RunDir

log = logs.get(__name__)


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
def connect(address: str | None = None, quiet: bool = True) -> Iterator[None]:
    """Connect to Ray for the duration of a run (what it asks for comes from the study's config,
    never from what the cluster holds now: see :mod:`iclr_ray.resources`).

    ``address`` is the one :func:`resolve_address` returned (None: embedded local Ray)."""
    import ray

    owned = not ray.is_initialized()
    if owned:
        # Embedded Ray: one torch/BLAS thread per worker process; on a small machine threads of
        # several workers fighting over the same cores slow small layers down by an order of
        # magnitude or more. On a cluster (and inside `ray job submit`, whose runtime env may not
        # be merged with another) the cluster's or the job's runtime env decides
        # (clusters/runtime_env.yaml). Train V2's controller polls its workers every 2 s by
        # default and each report waits for the next poll, so the poll is made short. Train V2
        # also starts a preemption watcher per run, a process that polls for spot-node notices,
        # which an embedded Ray on one machine never gets: it is left out.
        env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.1"),
               "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": os.environ.get("RAY_TRAIN_ENABLE_PREEMPTION_WATCHER", "0")}
        dashboard: dict[str, Any] = {}
        if not address:
            # Tune frees a stopped trial's placement groups through the State API, which finds
            # the dashboard by RAY_API_SERVER_ADDRESS; without it they leak and the next trial
            # hangs on worker start-up. So: the dashboard on a known port.
            port = free_port()
            env["RAY_API_SERVER_ADDRESS"] = os.environ["RAY_API_SERVER_ADDRESS"] = f"http://127.0.0.1:{port}"
            dashboard = {"include_dashboard": True, "dashboard_host": "127.0.0.1", "dashboard_port": port}
        # address="local" always starts a new embedded Ray: plain ray.init() would attach to
        # whatever cluster /tmp/ray/ray_current_cluster names, even a dead one.
        ray.init(address=address or "local", runtime_env=None if address else {"env_vars": env},
                 log_to_driver=not quiet, configure_logging=False, **dashboard)
    try:
        yield
    finally:
        if owned:
            ray.shutdown()


def cluster_size() -> dict[str, float]:
    """The CPUs and GPUs of the connected cluster now: recorded in a run's report (``env``) only; no
    resource decision reads it (an autoscaling cluster has no GPU node until one is asked for)."""
    import ray

    res = ray.cluster_resources()
    return {"cluster_cpus": res.get("CPU"), "cluster_gpus": res.get("GPU", 0)}


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
    """A counter that logs ``desc done/total elapsed eta`` lines as work completes, at most one a
    ``min_interval`` seconds (and always the last)."""

    def __init__(self, total: int, desc: str, min_interval: float = 1.0):
        self.total, self.desc, self.done = total, desc, 0
        self.start = self.last = time.monotonic()
        self.min_interval = min_interval

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.done >= self.total or now - self.last >= self.min_interval:
            self.last = now
            elapsed = now - self.start
            eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
            log.info("  %s: %d/%d  %.0fs elapsed, ~%.0fs left", self.desc, self.done, self.total, elapsed, eta)


@dataclass
class RunContext:
    """What a study's ``run(cfg, ctx)`` gets: the run directory, what ``prepare`` returned, logging
    to metrics.jsonl, status lines and progress while Ray work finishes."""

    run_dir: RunDir
    preset: str
    inputs: Any = None
    """what the study's ``prepare(cfg)`` returned (read before Ray started)"""

    def log(self, **record: Any) -> None:
        """One JSON line in metrics.jsonl."""
        self.run_dir.log(record)

    def say(self, message: str, *args: Any) -> None:
        """A status line (``logging``, %-style arguments)."""
        log.info("  " + message, *args)

    def save_plots(self, figures: dict[str, Any]) -> None:
        """Each figure as plots/<name>.png."""
        self.run_dir.save_plots(figures)

    def progress(self, total: int, desc: str) -> Progress:
        return Progress(total, desc)

    def wait_all(self, refs: list, desc: str) -> list:
        """``ray.get`` a list of object refs in order, logging progress as they finish."""
        import ray

        bar = self.progress(len(refs), desc)
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=min(len(pending), max(1, len(refs) // 20)))
            bar.update(len(ready))
        return ray.get(refs)
