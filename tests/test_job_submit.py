"""`ray job submit` of a smoke run to the session's `ray start --head` cluster on 127.0.0.1, with
the working directory uploaded the way the README tells users to."""
import json
import subprocess
import time

import pytest

from conftest import BIN, REPO


@pytest.mark.slow
def test_ray_job_submit_smoke_run(ray_cluster, tmp_path):
    out = tmp_path / "job_run"
    cmd = [str(BIN / "ray"), "job", "submit", "--address", ray_cluster.dashboard_url,
           "--working-dir", ".", "--runtime-env", "clusters/runtime_env.yaml", "--",
           "python", "-m", "iclr_ray", "run", "coord_sketch", "--preset", "smoke", "--out", str(out)]
    for _ in range(12):  # the head's job agent can register after the dashboard answers; Ray says retry
        res = subprocess.run(cmd, cwd=REPO, env=ray_cluster.env, capture_output=True, text=True, timeout=600)
        log = res.stdout + res.stderr
        if "No available agent to submit job" not in log:
            break
        time.sleep(5)
    assert res.returncode == 0, log[-3000:]
    assert "succeeded" in log and "claims held" in log
    result = json.loads((out / "result.json").read_text())
    assert result["study"] == "coord_sketch" and result["env"]["cluster_cpus"] == 2
    assert (out / "report.md").exists() and len(list((out / "plots").glob("*.png"))) == 4
    uploaded = [line for line in log.splitlines() if "Uploading package" in line or "Creating a file package" in line]
    assert uploaded, log[-2000:]
