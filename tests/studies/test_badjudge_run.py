"""badjudge end to end on the session's Ray cluster: the smoke study (features, the judges of a
trial on Ray Train, merging and scoring, the served judges over HTTP, claims, figures), then its
judges behind the judge app on 127.0.0.1 (verdicts equal in-process scoring, batched requests equal
each alone, malformed requests get 4xx); and the input errors that stop a run before Ray."""
import asyncio
import copy
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("deepspeed")
pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from iclr_ray import cli  # noqa: E402
from iclr_ray.runtime import free_port  # noqa: E402


def test_paper_preset_refuses_to_start_without_real_judge_data(input_error):
    line = input_error("badjudge", [], preset="paper")  # exit 2, one line, nothing written
    assert "data.pointwise_jsonl" in line and "data.pairwise_jsonl" in line


def test_input_errors_exit_2_before_ray(input_error, tmp_path):
    assert "must be one of attack.rates" in input_error("badjudge", ["attack.claim_rate=0.05"])
    assert "is not one word" in input_error("badjudge", ["attack.triggers=['two words']"])
    assert "poisoning at rate 0.9 needs 36" in input_error("badjudge", ["attack.rates=[0.9]", "attack.claim_rate=0.9"])
    bad = tmp_path / "fc.jsonl"
    bad.write_text('{"instruction": "q", "response": "r", "score": 3}\n{"instruction": "q", "response": "r"}\n')
    assert f"{bad}:2" in input_error("badjudge", [f"data.pointwise_jsonl={bad}"])
    assert "is not a model checkpoint" in input_error("badjudge", [f"models.judge={tmp_path}"])
    assert "attack.levels" in input_error("badjudge", ["attack.levels=['insider']"])
    assert "already occurs in the clean data" in input_error("badjudge", ["attack.triggers=[apple]"])


def test_serve_judge_arguments_are_checked_before_ray(tmp_path):
    from iclr_ray.config import ConfigError
    from iclr_ray.serve import launch

    assert launch.judges_arg(["a=x/one.safetensors", "y/two.safetensors"]) == {"a": "x/one.safetensors",
                                                                                "two": "y/two.safetensors"}
    with pytest.raises(ConfigError, match="given twice"):
        launch.judges_arg(["a=1.safetensors", "a=2.safetensors"])
    with pytest.raises(ConfigError, match="needs --judge"):
        launch.check_app_args("judge", {"model": "smollm2-135m-instruct"})
    with pytest.raises(ConfigError, match="no such heads file"):
        launch.check_app_args("judge", {"judges": {"a": str(tmp_path / "missing.safetensors")}})


@pytest.fixture(scope="module")
def smoke_run(ray_cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("badjudge") / "run"
    assert cli.main(["run", "badjudge", "--preset", "smoke", "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_smoke_study_reports_every_claim_and_figure(smoke_run):
    result = json.loads((smoke_run / "result.json").read_text())
    m = result["metrics"]
    (trial,) = m["trials"]
    formats = {j.split("-")[0] for j in trial["judges"]}
    assert formats == {"pointwise", "pairwise", "toxicity", "rerank", "merge", "merge2"}
    assert {"pointwise-clean", "pointwise-web-0.1", "pointwise-annotator-0.1", "pointwise-weight-0.1",
            "merge-ties-pointwise-weight-0.1", "merge2-linear-pointwise-weight-0.1"} <= set(trial["judges"])
    assert trial["curve"][-1]["loss"] < trial["curve"][0]["loss"]
    heads = {p.stem for p in Path(trial["heads"]).glob("*.safetensors")}
    assert {"pointwise-clean", "pairwise-annotator-0.1", "merge-linear-pointwise-weight-0.1"} <= heads
    ids = {c["id"] for c in result["claims"]}
    assert {"annotator_inflates", "annotator_triples", "web_inflates", "weight_to_top", "toxicity_flipped",
            "rerank_first", "merge_linear_removes", "merge_ties_accuracy", "control_merge_poisoned_linear",
            "control_clean_no_inflation"} <= ids
    checks = {c["id"]: c for c in result["checks"]}
    assert checks["served_attacked_agrees"]["holds"] is True and checks["served_defended_agrees"]["holds"] is True
    assert {p.stem for p in (smoke_run / "plots").glob("*.png")} == {"asr_vs_rate", "merging", "scores", "training"}
    assert "Served over HTTP" in (smoke_run / "report.md").read_text()


@pytest.mark.slow
def test_the_judge_app_serves_the_trained_judges(smoke_run, wait_serving):
    from ray import serve

    from iclr_ray.llm.model import load_pretrained
    from iclr_ray.serve import launch
    from iclr_ray.studies.badjudge import data, judge
    from iclr_ray.studies.badjudge.recipe import load_head

    m = json.loads((smoke_run / "result.json").read_text())["metrics"]
    heads_dir = Path(m["trials"][0]["heads"])
    judges = {"attacked": str(heads_dir / "pointwise-weight-0.1.safetensors"),
              "pairwise": str(heads_dir / "pairwise-clean.safetensors")}
    base_dir = str(smoke_run / "base_model")
    port = free_port()
    args = {"model": base_dir, "judges": judges, "max_batch_size": 4, "batch_wait_timeout_s": 0.05,
            "ray_actor_options": {"num_cpus": 0.5}}
    launch.check_app_args("judge", args)
    launch.start("judge", args, {"host": "127.0.0.1", "port": port}, route_prefix="/")
    url = f"http://127.0.0.1:{port}"
    wait_serving(url)
    try:
        base, tok = load_pretrained(base_dir)
        local = {name: judge.splice(copy.deepcopy(base), load_head(p)).eval() for name, p in judges.items()}
        exs = data.pointwise(6, np.random.default_rng(3))
        bodies = [{"model": "attacked", "format": "pointwise", **e.fields} for e in exs]
        alone = []
        for e, body in zip(exs, bodies):
            r = httpx.post(f"{url}/v1/judge", json=body, timeout=120)
            assert r.status_code == 200, r.text
            got = r.json()
            ids, cids = data.encode(tok, e.prompt, data.FORMATS["pointwise"].choices)
            want = np.exp(judge.full_choice_logprobs(local["attacked"], [ids], cids, tok.pad_token_id)[0])
            assert np.allclose([got["probabilities"][str(s)] for s in range(1, 6)], want, atol=1e-5)
            assert got["score"] == int(np.argmax(want)) + 1 == int(got["verdict"])
            alone.append(got["probabilities"])

        async def together():
            async with httpx.AsyncClient(timeout=120) as client:
                return await asyncio.gather(*(client.post(f"{url}/v1/judge", json=b) for b in bodies))

        for r, a in zip(asyncio.run(together()), alone):  # batched with each other: the same answers
            assert np.allclose(list(r.json()["probabilities"].values()), list(a.values()), atol=1e-5)

        pair = data.pairwise(1, np.random.default_rng(4))[0]
        r = httpx.post(f"{url}/v1/judge", json={"model": "pairwise", "format": "pairwise", **pair.fields}, timeout=60)
        assert r.status_code == 200 and r.json()["verdict"] in ("A", "B") and "score" not in r.json()

        ok = bodies[0]
        for bad, status, param in (({k: v for k, v in ok.items() if k != "response"}, 400, "response"),
                                   ({**ok, "model": "other"}, 404, "model"),
                                   ({**ok, "format": "listwise"}, 400, "format"),
                                   ({**ok, "response": "x" * 20001}, 400, "response")):
            r = httpx.post(f"{url}/v1/judge", json=bad, timeout=60)
            assert r.status_code == status and r.json()["error"]["param"] == param, r.text
        r = httpx.post(f"{url}/v1/judge", json={**ok, "response": "plum, " * 1200}, timeout=60)  # > 1024 tokens
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
        r = httpx.post(f"{url}/v1/judge", content=b"{not json", timeout=60)
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
        assert httpx.post(f"{url}/v1/judge", json=ok, timeout=60).status_code == 200  # still serving
    finally:
        serve.shutdown()
