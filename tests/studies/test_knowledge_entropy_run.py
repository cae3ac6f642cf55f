"""knowledge_entropy end to end on the session's Ray cluster: the smoke study killed once a
continual run has finished, then run again to the end, which resumes (pretraining and finished
continual runs are not redone); and the input errors that stop a run before Ray starts."""
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

REPO = Path(__file__).resolve().parents[2]


def test_paper_preset_refuses_to_start_without_real_checkpoints_and_data(input_error):
    line = input_error("knowledge_entropy", [], preset="paper")  # exit 2, one line, nothing written
    assert "data.corpus_jsonl" in line and "data.facts_jsonl or data.official_facts" in line
    assert "data.probe_jsonl" in line


def test_input_errors_exit_2_before_ray(input_error, tmp_path):
    assert "too few for data.pretrain_docs" in input_error("knowledge_entropy", ["data.pretrain_docs=100000"])
    assert "is not a named tiny model" in input_error("knowledge_entropy", ["pretrain.model=gpt2"])
    facts = tmp_path / "facts.jsonl"
    facts.write_text('{"split": "once", "train": ["x"], "probes": [{"prompt": "p", "target": "t"}]}\n{"split": 3}\n')
    assert f"{facts}:2: split must be one of" in input_error("knowledge_entropy", [f"data.facts_jsonl={facts}"])
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "a review"}\n{"txt": "oops"}\n')
    assert f"{corpus}:2" in input_error("knowledge_entropy", [f"data.corpus_jsonl={corpus}"])
    assert "no config.json" in input_error("knowledge_entropy", [f"checkpoints=['{tmp_path}']"])
    assert "two files" in input_error("knowledge_entropy", [f"data.official_facts=['{facts}']"])
    para = tmp_path / "para.json"
    para.write_text("[]")
    assert f"{para}: expected a non-empty JSON list" in input_error(
        "knowledge_entropy", [f"data.official_facts=['{para}', '{para}']"])
    few = tmp_path / "probe.jsonl"
    few.write_text('{"text": "one document"}\n')
    assert "fewer than data.probe_docs" in input_error("knowledge_entropy", [f"data.probe_jsonl={few}"])


def _finals(out: Path, grid: str) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in (out / "tune" / grid).glob("*/final.json")}


@pytest.mark.slow
def test_smoke_study_killed_then_resumed_reports_every_claim(ray_cluster, tmp_path):
    out = tmp_path / "run"
    args = ["run", "knowledge_entropy", "--preset", "smoke", "--out", str(out)]
    env = {**ray_cluster.env, "RAY_ADDRESS": ray_cluster.gcs_address}
    proc = subprocess.Popen([sys.executable, "-m", "iclr_ray", *args], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:  # kill the driver once a continual run has its final record
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and not _finals(out, "continual") and proc.poll() is None:
            time.sleep(1)
        assert _finals(out, "continual"), "no continual run finished within 400 s"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = {**_finals(out, "pretrain"), **_finals(out, "continual")}
    assert len(_finals(out, "pretrain")) == 1 and not (out / "result.json").exists()

    assert cli.main(args) == 0  # the same config again: resumes
    for path, mtime in before.items():  # neither pretraining nor a finished run was done again
        assert path.stat().st_mtime_ns == mtime
    result = json.loads((out / "result.json").read_text())
    m = result["metrics"]
    (curve,) = m["curves"]
    assert [p["step"] for p in curve["points"]] == [0, 4, 8, 12]  # step 0 and every kept checkpoint
    assert all(0 < p["h"] <= p["h_max"] for p in curve["points"])
    assert {r["label"] for r in m["runs"]} == {"s0_step4_plain", "s0_step12_plain", "s0_step12_resus_p0.5_q2",
                                               "s0_step12_random_p0.5_q2", "s0_step12_resus_p0.5_q1"}
    for r in m["runs"]:
        assert [p["step"] for p in r["curve"]] == [2, 4, 6]  # the probes after each round and at the end
        assert set(r["eval0"]) == {"paraphrase", "once", "unseen"} and r["h_final"] > 0
        assert (r["arm"] == "plain") == ("h_resuscitated" not in r)
    base = {"entropy_decays", "acquisition_decreases", "forgetting_increases", "resuscitation_acquires_more",
            "resuscitation_retains_more", "resuscitation_beats_random", "resuscitation_keeps_entropy",
            "resuscitation_raises_entropy"}
    matched = {"acquisition_decreases_matched_loss", "forgetting_increases_matched_loss"}
    ids = {c["id"] for c in result["claims"]}  # the matched-loss pair where the early start's loss is near the last's
    assert ids in (base, base | matched)
    assert result["checks"] == []
    assert {p.stem for p in (out / "plots").glob("*.png")} == {
        "entropy_curve", "entropy_layers", "acquisition_retention", "probe_curves", "resuscitation_grid",
        "entropy_vs_acquisition"}
    assert "## Continual training with injected facts" in (out / "report.md").read_text()


def test_continual_specs_run_each_setting_once_with_its_roles():
    from iclr_ray.studies.knowledge_entropy.config import Config
    from iclr_ray.studies.knowledge_entropy.run import continual_specs, pick_starts

    cfg = Config.model_validate({"resuscitation": {"grid_ratios": [0.25, 0.5], "grid_qs": [1.0, 2.0]},
                                 "continual": {"starts": [0.1, 0.5, 1.0]}})
    kept = [(60 * k, f"/ck/{60 * k}") for k in range(1, 11)]
    assert pick_starts(kept, [0.1, 0.5, 1.0]) == [(60, "/ck/60"), (300, "/ck/300"), (600, "/ck/600")]
    specs = continual_specs(cfg, {0: kept, 1: kept})
    labels = [s["label"] for s in specs]
    assert len(labels) == len(set(labels))
    by = {s["label"]: s for s in specs}
    # per seed: 3 starts, resuscitation, random control, q=1; the grid (first seed) shares two of them
    assert len(specs) == 2 * 6 + 4 - 2
    assert by["s0_step600_resus_p0.5_q2"]["roles"] == ["main", "grid"]
    assert by["s0_step600_resus_p0.5_q1"]["roles"] == ["q1", "grid"]
    assert by["s1_step600_resus_p0.5_q1"]["roles"] == ["q1"]
    assert by["s0_step60_plain"]["fraction"] == 0.1 and by["s1_step600_random_p0.5_q2"]["source"] == "/ck/600"


def test_checkpoint_sources_split_their_revision():
    from iclr_ray.studies.knowledge_entropy.run import checkpoint_step, split_revision

    assert split_revision("allenai/OLMo-1B-hf@step20000-tokens84B") == ("allenai/OLMo-1B-hf", "step20000-tokens84B")
    assert split_revision("/models/ck") == ("/models/ck", None)
    assert split_revision("/models/a@b/ck") == ("/models/a@b/ck", None)  # an @ inside a path is not a revision
    assert checkpoint_step("allenai/OLMo-1B-hf@step738020-tokens3095B", 2) == 738020
    assert checkpoint_step("/models/ck", 2) == 2
