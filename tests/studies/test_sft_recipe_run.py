"""sft_recipe end to end on the session's Ray cluster: the smoke study (pre-training, Tune trials
of the Ray Train + DeepSpeed loop, scores, claims, plots), a 3-trial sweep under the
early-termination scheduler, and a sweep killed mid-way and finished with Tuner.restore; and the
input errors that stop a run before Ray starts (the paper preset without real data among them)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("deepspeed")

from iclr_ray import cli  # noqa: E402
from iclr_ray.studies.sft_recipe.analysis import item_table, scores  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SPACE = REPO / "tune_spaces" / "sft_smoke.yaml"


def test_paper_preset_refuses_to_start_without_real_sft_data(input_error):
    line = input_error("sft_recipe", [], preset="paper")  # exit 2, one line, nothing written
    assert "data.knowledge_jsonl" in line and "data.skills_jsonl" in line  # it names the keys to set


def test_input_errors_exit_2_before_ray(input_error):
    assert "fine-tunes on real SFT data only" in input_error("sft_recipe", ["data.require_real=true"])
    assert "less than one step of batch 8" in input_error("sft_recipe", ["early.window_rows=6"])
    assert "is not below sft.sample_budget=32" in input_error("sft_recipe", ["early.window_rows=32"])


@pytest.mark.slow
def test_smoke_study_runs_every_experiment_and_reports_claims(ray_cluster, tmp_path):
    out = tmp_path / "run"
    # the smoke preset skips phased/warmup; switch them on at smoke size so every claim is computed.
    # ZeRO stage 0, where DeepSpeed keeps no grad norm: the early profile must still see real ones
    assert cli.main(["run", "sft_recipe", "--preset", "smoke", "--out", str(out), "--set", "phased=true",
                     "--set", "pretrain.steps=4", "--set", "warmup.warmup_steps=[0, 2]",
                     "--set", "early.rerun_with_scheduler=true", "--set", "sft.zero_stage=0"]) == 0
    result = json.loads((out / "result.json").read_text())
    m = result["metrics"]
    trials = m["trials"]
    labels = [t["label"] for t in trials]
    assert len(labels) == len(set(labels))  # shared specs ran once
    assert all(t["finished"] and 0 <= t["score"] <= 1 for t in trials)
    assert all(t["samples"] == 32 for t in trials)  # equal sample budget whatever the batch
    steps = {t["label"]: len(t["curve"]) for t in trials}
    assert {steps[t["label"]] for t in trials if t["batch"] == 4} == {8}
    # every logged grad norm is a real one (they all read 0 at stage 0 before the loop took its own),
    # so the early profiles, and the scheduler's ranking, tell the trials apart
    assert all(c["grad_norm"] > 0 for t in trials for c in t["curve"])
    assert len({t["early_grad_norm"] for t in trials}) == len(trials)
    # each trial kept its per-item outcomes, and they give back its score
    x, half = item_table(trials)
    assert x.shape == (24, len(trials)) and list(scores(x, half)) == pytest.approx([t["score"] for t in trials])
    assert any("eval_loss_knowledge" in c for t in trials for c in t["curve"])
    assert Path(m["pretrained_model"], "config.json").is_file()
    ids = {c["id"] for c in result["claims"]}
    assert {"large_batch_wins", "early_grad_norm_predicts", "early_loss_predicts", "warmup_unneeded",
            "stacked_matches_phased", "early_stop_keeps_best"} <= ids
    assert {c["id"] for c in result["checks"]} == {"stacked_sample_efficient", "equal_sample_budget"}
    assert all(c["n"] >= 2 and c["ci"] is not None for c in result["claims"])  # every claim has its interval
    # the scheduler saw the grid's recorded curves. Of two trials (keep 0.5, decisions asynchronous)
    # only the one with the higher early grad norm can be stopped, and only if it reaches the
    # window second; a trial let through ends with the score the grid trial recorded
    replayed = {t["label"]: t for t in m["early_stop_trials"]}
    grid = {t["label"]: t for t in trials if "grid" in t["experiments"]}
    assert set(replayed) == set(grid) and m["early_stop"]["mode"] == "replay"
    worse = max(grid, key=lambda k: grid[k]["early_grad_norm"])
    for label, r in replayed.items():
        if r["finished"]:
            assert r["score"] == grid[label]["score"] and r["samples"] == 32
        else:
            assert label == worse and r["samples"] < 32
    spent = sum(r["samples"] for r in replayed.values())
    assert m["early_stop"]["stopped"] == sum(not r["finished"] for r in replayed.values()) <= 1
    assert m["early_stop"]["compute_saved"] == pytest.approx(1 - spent / 64)
    for c in result["claims"]:  # holds is the comparison of the measured value, whatever it is
        assert c["measured"] is None or isinstance(c["measured"], float)
    plots = {p.stem for p in (out / "plots").glob("*.png")}
    assert {"loss_curves", "early_vs_score", "grid_heatmap", "warmup_schedule", "phased_vs_stacked"} <= plots
    report = (out / "report.md").read_text()
    assert "## Trials" in report and "large_batch_wins" in report
    assert list((out / "tune").rglob("events.out.tfevents.*"))  # TensorBoard files of the trials


@pytest.mark.slow
def test_sweep_with_the_early_termination_scheduler(ray_cluster, tmp_path):
    out = tmp_path / "sweep"
    assert cli.main(["sweep", "sft_recipe", "--preset", "smoke", "--space", str(SPACE), "--out", str(out),
                     "--set", "pretrain.steps=0", "--set", "early.min_trials=2"]) == 0
    m = json.loads((out / "result.json").read_text())["metrics"]
    assert m["trials"] == 3
    stopped = [r for r in m["rows"] if not r["finished"]]
    assert 1 <= len(stopped) <= 2  # keep=0.5: the worse of each comparison stops at the window
    assert all(r["samples"] < 32 and r["error"] is None for r in stopped)
    assert m["best"]["finished"] and m["best"]["score"] is not None
    assert "| sft.lr | score |" in (out / "report.md").read_text()


@pytest.mark.slow
def test_interrupted_sweep_resumes_with_tuner_restore(ray_cluster, tmp_path):
    out = tmp_path / "sweep"
    env = {**ray_cluster.env, "RAY_ADDRESS": ray_cluster.gcs_address}
    cmd = [sys.executable, "-m", "iclr_ray", "sweep", "sft_recipe", "--preset", "smoke", "--space", str(SPACE),
           "--scheduler", "fifo", "--out", str(out), "--set", "pretrain.steps=0", "--set", "sft.sample_budget=64"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:  # kill the driver once one trial has its final score and the others are still running
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and not _finished_trials(out):
            time.sleep(1)
        assert _finished_trials(out), "no trial finished within 400 s"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done_before = _finished_trials(out)
    assert len(done_before) < 3 and not (out / "result.json").exists()
    finals = {p: p.stat().st_mtime_ns for p in done_before}
    # a kill can land while Tune copies its experiment state (it happened in CI): make it so
    state = sorted((out / "tune" / "sweep").glob("experiment_state-*.json"))[-1]
    state.write_text("")

    assert cli.main(["sweep", "sft_recipe", "--preset", "smoke", "--space", str(SPACE), "--scheduler", "fifo",
                     "--resume", str(out)]) == 0
    m = json.loads((out / "result.json").read_text())["metrics"]
    assert m["trials"] == 3 and m["finished"] == 3
    for path, mtime in finals.items():  # finished trials were neither trained nor scored again
        assert path.stat().st_mtime_ns == mtime


def _finished_trials(out: Path) -> list[Path]:
    """The final.json of each trial that has saved its scores. (Not the trial's result.json: the
    scores reach Tune with the last Train step, while ``fit`` is still returning and before
    final.json is written; a kill in between left a "scored" trial without one, in CI.)"""
    return sorted((out / "tune" / "sweep").glob("*/final.json"))
