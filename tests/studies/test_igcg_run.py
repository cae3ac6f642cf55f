"""igcg end to end on the session's Ray cluster: the smoke study (every optimisation a Ray task,
easy-to-hard runs starting from the easy target's suffix, artefacts, claims, figures), a rerun into
the same directory that runs only what is missing, a two-trial Tune sweep; and the input errors that
stop a run before Ray."""
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr_ray import cli  # noqa: E402

SPACE = Path(__file__).resolve().parents[2] / "tune_spaces" / "igcg_smoke.yaml"


def test_paper_preset_refuses_to_start_without_the_users_targets(input_error):
    assert "targets_file=PATH" in input_error("igcg", [], preset="paper")


def test_input_errors_exit_2_before_ray(input_error, tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_text("goal,target\na,b\nc,\n")
    assert f"{bad}:3" in input_error("igcg", [f"targets_file={bad}"])
    assert "no such file" in input_error("igcg", [f"targets_file={tmp_path / 'missing.jsonl'}"])
    assert "ks must hold 1" in input_error("igcg", ["ks=[3,7]"])
    assert "is not a model checkpoint" in input_error("igcg", [f"model={tmp_path}"])
    assert "easy=3 but there are 2 targets" in input_error("igcg", [f"targets_file={_two(tmp_path)}", "easy=3"])


def _two(tmp_path) -> Path:
    p = tmp_path / "two.jsonl"
    p.write_text('{"message": "Say hi.", "target": "ok go"}\n{"message": "Name a colour.", "target": "ok red"}\n')
    return p


@pytest.fixture(scope="module")
def smoke_run(ray_cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("igcg") / "run"
    assert cli.main(["run", "igcg", "--preset", "smoke", "--out", str(out)]) == 0
    return out


def _runs_logged(out: Path) -> list[str]:
    return [r["label"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
            if r.get("kind") == "run"]


@pytest.mark.slow
def test_smoke_study_runs_every_optimisation_and_exports_them(smoke_run):
    result = json.loads((smoke_run / "result.json").read_text())
    m = result["metrics"]
    kinds = sorted((r["method"], r["K"], r["init"]) for r in m["runs"])
    # 2 targets: GCG, I-GCG K=3 and the random control on each, easy-to-hard on target 1
    assert kinds == sorted([("gcg", 1, "default")] * 2 + [("igcg", 3, "default")] * 2 + [("random", 3, "default")] * 2
                           + [("igcg", 3, "easy")])
    for r in m["runs"]:
        assert len(r["loss"]) == len(r["seconds"]) == len(r["changed"]) and len(r["suffix_ids"]) == 6
        assert r["success_step"] is not None or len(r["loss"]) == m["budget"] + 1
        assert isinstance(r["generates"], bool) and len(r["cpu_seconds"]) == len(r["loss"])
        if r["success_step"] is not None:  # counted only once its text check passed: the final suffix's
            assert r["generates"] and r["token_success_step"] <= r["success_step"]
    easy = {r["seed"]: r for r in m["runs"] if r["target"] == 0 and r["method"] == "igcg" and r["init"] == "default"}
    for r in (r for r in m["runs"] if r["init"] == "easy"):  # started from the easy target's final suffix
        assert r["init_suffix"] == easy[r["seed"]]["suffix"]
    ids = {c["id"] for c in result["claims"]}
    assert ids == {"fewer_steps_K3", "less_time_K3", "tenfold_K3", "success_rate_K3", "easy_to_hard",
                   "gradient_guided"}
    suffixes = [json.loads(x) for x in (smoke_run / "artefacts" / "suffixes.jsonl").read_text().splitlines()]
    assert len(suffixes) == 7 and {"suffix", "suffix_ids", "message", "target_text", "final_loss"} <= set(suffixes[0])
    steps = (smoke_run / "artefacts" / "steps.jsonl").read_text().splitlines()
    assert len(steps) == sum(len(r["loss"]) for r in m["runs"])
    assert {p.stem for p in (smoke_run / "plots").glob("*.png")} == {"loss", "steps_to_success"}
    assert "random K=3 (control)" in (smoke_run / "report.md").read_text()


@pytest.mark.slow
def test_rerun_into_the_same_directory_runs_only_the_missing_optimisations(smoke_run):
    before = _runs_logged(smoke_run)
    assert len(before) == 7
    gone = ["t1_igcg3-easy_s0.json", "t0_gcg1_s0.json"]
    for name in gone:
        (smoke_run / "runs" / name).unlink()
    (smoke_run / "result.json").unlink()
    assert cli.main(["run", "igcg", "--preset", "smoke", "--out", str(smoke_run)]) == 0
    assert sorted(_runs_logged(smoke_run)) == ["t0/gcg1/s0", "t1/igcg3+easy/s0"]  # metrics.jsonl starts anew
    assert len(json.loads((smoke_run / "result.json").read_text())["metrics"]["runs"]) == 7


@pytest.mark.slow
def test_sweep_over_k(ray_cluster, tmp_path):
    out = tmp_path / "sweep"
    assert cli.main(["sweep", "igcg", "--preset", "smoke", "--space", str(SPACE), "--out", str(out),
                     "--scheduler", "fifo"]) == 0
    m = json.loads((out / "result.json").read_text())["metrics"]
    assert m["trials"] == 2 and m["finished"] == 2
    assert sorted(r["params"]["attack.K"] for r in m["rows"]) == [1, 3]
    for r in m["rows"]:
        assert 0 <= r["success_rate"] <= 1 and 0 <= r["steps"] <= 6 and r["seconds"] > 0
    assert "| attack.K | steps | finished | success_rate | seconds |" in (out / "report.md").read_text()
