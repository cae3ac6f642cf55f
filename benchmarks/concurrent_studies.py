"""Two studies at once on one cluster against each alone, on the same cluster in the same run.

A shared cluster runs other people's jobs: a study's Tune trials and Train runs must then wait in
Ray's queue for what they asked for, not stall. This starts one local Ray cluster (``--num-cpus``,
2 by default: the test machine), runs each study's ``--preset smoke`` alone through
``iclr-ray run ... --address``, then both at once, and prints each study's wall time alone and
together with the ratio (the issue's bound: about 2x, since two studies share the same CPUs).

    python benchmarks/concurrent_studies.py [--studies knowledge_entropy sft_recipe] [--num-cpus 2]
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from iclr_ray.runtime import free_port

BIN = Path(sys.executable).parent


def start_head(num_cpus: int, tmp: Path) -> tuple[subprocess.Popen, str, dict]:
    gcs, dash = free_port(), free_port()
    # as the tests' cluster (tests/conftest.py): token authentication with a token every process
    # of this benchmark shares, Ray kept on loopback, one torch thread per process
    env = dict(os.environ, RAY_API_SERVER_ADDRESS=f"http://127.0.0.1:{dash}", RAY_AUTH_MODE="token",
               RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", OMP_NUM_THREADS="1")
    if not (env.get("RAY_AUTH_TOKEN") or env.get("RAY_AUTH_TOKEN_PATH") or (Path.home() / ".ray" / "auth_token").is_file()):
        import secrets

        env["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs}",
         f"--num-cpus={num_cpus}", "--num-gpus=0", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
         f"--dashboard-port={dash}", f"--dashboard-agent-listen-port={free_port()}",
         f"--dashboard-agent-grpc-port={free_port()}", f"--metrics-export-port={free_port()}",
         f"--runtime-env-agent-port={free_port()}", f"--ray-client-server-port={free_port()}",
         "--disable-usage-stats", f"--temp-dir={tempfile.mkdtemp(prefix='ray', dir='/tmp')}"],
        env=env, stdout=open(tmp / "head.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"ray start exited {proc.returncode}: {(tmp / 'head.log').read_text()[-1500:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{dash}/api/version", timeout=2)
            break
        except urllib.error.HTTPError:
            break
        except OSError:
            time.sleep(0.5)
    else:
        raise SystemExit("the Ray head did not come up within 120 s")
    return proc, f"127.0.0.1:{gcs}", env


def launch(study: str, address: str, env: dict, out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([str(BIN / "iclr-ray"), "run", study, "--preset", "smoke", "--out", str(out),
                             "--address", address], env=env, stdout=subprocess.DEVNULL,
                            stderr=open(f"{out}.log", "w"), start_new_session=True)
    proc.log = Path(f"{out}.log")  # type: ignore[attr-defined]
    return proc


def wait(procs: dict[str, subprocess.Popen], start: float, timeout: float) -> dict[str, float]:
    took: dict[str, float] = {}
    while len(took) < len(procs):
        if time.monotonic() - start > timeout:
            for p in procs.values():
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
            raise SystemExit(f"still running after {timeout:.0f} s: {sorted(set(procs) - set(took))}")
        for study, p in procs.items():
            if study not in took and p.poll() is not None:
                if p.returncode:
                    raise SystemExit(f"{study} exited {p.returncode}:\n{p.log.read_text()[-3000:]}")
                took[study] = time.monotonic() - start
        time.sleep(0.5)
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", nargs=2, default=["knowledge_entropy", "sft_recipe"])
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="concurrent_studies."))
    proc, address, env = start_head(args.num_cpus, tmp)
    try:
        alone = {}
        for study in args.studies:
            start = time.monotonic()
            alone |= wait({study: launch(study, address, env, tmp / f"alone_{study}")}, start, args.timeout)
            print(f"{study} alone: {alone[study]:.0f} s", flush=True)
        start = time.monotonic()
        together = wait({s: launch(s, address, env, tmp / f"together_{s}") for s in args.studies}, start, args.timeout)
        for study in args.studies:
            print(f"{study} together: {together[study]:.0f} s  ratio {together[study] / alone[study]:.2f}x alone")
        both = max(together.values())
        print(f"both together: {both:.0f} s against {sum(alone.values()):.0f} s one after the other "
              f"({both / sum(alone.values()):.2f}x)")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
