"""Two studies at once on one cluster, as a shared cluster runs other people's jobs: knowledge_entropy
(Tune trials of one Train worker each, tasks between the grids) and sft_recipe (trials of two Train
workers) compete for the session cluster's two CPUs. Each Train run waits for its workers in Ray's
queue, bounded (``placement_timeout_s``), and both studies finish."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_two_studies_at_once_on_one_cluster_both_finish(ray_cluster, tmp_path):
    env = {**ray_cluster.env, "RAY_ADDRESS": ray_cluster.gcs_address}
    procs = {study: subprocess.Popen([sys.executable, "-m", "iclr_ray", "run", study, "--preset", "smoke", "--out",
                                      str(tmp_path / study)], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
             for study in ("knowledge_entropy", "sft_recipe")}
    errors = {}
    try:
        for study, proc in procs.items():
            _, err = proc.communicate(timeout=1200)
            errors[study] = (proc.returncode, err[-3000:])
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    for study, (code, err) in errors.items():
        assert code == 0, f"{study}: {err}"
        result = json.loads((tmp_path / study / "result.json").read_text())
        assert result["claims"], study
