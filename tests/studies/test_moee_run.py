"""moee end to end on the session's Ray cluster: the smoke study (MoE LMs pre-trained through Ray
Train in Tune trials, one encoding and one scoring task per model x task, the alpha sweep's Tune
trials, claims, figures), then a trained MoE LM behind the embedding app on 127.0.0.1 (HS, RW and
MoEE vectors equal to in-process encoding, 4xx on bad requests); and the input errors that stop a
run before Ray."""
import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
httpx = pytest.importorskip("httpx")

from iclr_ray import cli  # noqa: E402


def test_input_errors_exit_2_before_ray(input_error, tmp_path):
    assert "is not a named tiny mixture of experts" in input_error("moee", ["pretrain.model=tiny-llama"])
    assert "is not a model checkpoint" in input_error("moee", [f"models=['{tmp_path}']"])
    assert "needs trust_remote_code" in input_error("moee", ["models=[deepseek-ai/deepseek-moe-16b-base]"])
    assert "eval.alphas must all be >= 0" in input_error("moee", ["eval.alphas=[-1.0]"])
    assert "leaves no pre-training text" in input_error("moee", ["data.eval_docs=900000"])
    assert "prompt" in input_error("moee", ["encoding.prompt=oneword"])


def test_paper_preset_needs_mteb_or_says_so(input_error):
    try:
        import mteb  # noqa: F401
    except ImportError:
        assert "needs the mteb package: pip install mteb" in input_error("moee", [], preset="paper")
    else:
        pytest.skip("mteb is installed: the paper preset would fetch MTEB's data")


@pytest.fixture(scope="module")
def smoke_run(ray_cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("moee") / "run"
    assert cli.main(["run", "moee", "--preset", "smoke", "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_smoke_study_scores_every_view_of_every_model(smoke_run):
    result = json.loads((smoke_run / "result.json").read_text())
    m = result["metrics"]
    assert m["models"] == ["seed0", "seed1"] and m["source"] == "reviews"
    assert m["dims"] == {"hs": 64, "rw": 2 * 4, "rw_kind": {"seed0": "logits", "seed1": "logits"}}
    assert [t["kind"] for t in m["tasks"]] == ["sts", "classification", "clustering", "pair_classification",
                                                "reranking"]
    for t in m["tasks"]:
        for model in m["models"]:
            views = m["scores"][t["name"]][model]
            assert set(views) == {"hs", "hs_raw", "rw", "concat", "sum", "sum_alpha0", "rw_untrained", "sum_untrained"}
            assert all(len(v) == t["units"] for v in views.values())
            assert views["sum_alpha0"] == views["hs"] and views["hs_raw"] != views["hs"]
        assert len(m["sweep"]["per_task"][t["name"]]) == 2  # alphas 0 and 1, one score per model each
        dev = m["dev"][t["name"]]
        assert len(dev) == int(0.3 * t["units"]) and len(set(dev)) == len(dev)  # smoke: every task has a dev split
    # alpha chosen on the dev units: the sweep's best dev mean; z-scoring statistics from texts outside the test units
    best = max(range(2), key=lambda i: (m["sweep"]["dev_mean"][i], -i))
    assert m["alpha_chosen"] == "dev" and m["alpha"] == m["sweep"]["alphas"][best]
    assert m["standardised_on"] == "fit texts"
    assert {c["id"] for c in result["claims"]} == {
        "sum_beats_hs_sts", "sum_beats_hs_classification", "sum_beats_hs_clustering",
        "sum_beats_hs_pair_classification", "sum_beats_hs_reranking", "sum_beats_concat", "learned_routing"}
    assert [c["id"] for c in result["checks"]] == ["alpha0_is_hs"] and result["checks"][0]["holds"] is True
    for model, path in m["sources"].items():  # the trained LMs, each with its standardisation beside it
        assert (smoke_run / "artefacts" / f"{model}_moee_standardise.npz").is_file()
        assert {"config.json", "moee_standardise.npz"} <= {p.name for p in __import__("pathlib").Path(path).iterdir()}
    assert len(m["pretrain"]["curves"]["seed0"]) >= 2
    assert {p.stem for p in (smoke_run / "plots").glob("*.png")} == {"scores", "alpha_sweep", "pretraining"}
    assert "MoEE (sum), untrained routers" in (smoke_run / "report.md").read_text()


@pytest.fixture(scope="module")
def served(smoke_run, wait_serving):
    from ray import serve

    from iclr_ray.runtime import free_port
    from iclr_ray.serve import launch

    path = json.loads((smoke_run / "result.json").read_text())["metrics"]["sources"]["seed0"]
    port = free_port()
    launch.check_app_args("embed", {"model": path})
    launch.start("embed", {"model": path, "served_name": "moe", "alpha": 2.0, "max_batch_size": 4,
                           "ray_actor_options": {"num_cpus": 0.5}}, {"host": "127.0.0.1", "port": port},
                 name="moee_embed")
    base = f"http://127.0.0.1:{port}"
    wait_serving(base)
    try:
        yield base, path
    finally:
        serve.shutdown()


@pytest.mark.slow
def test_served_moe_embeddings_equal_in_process_encoding(served):
    from iclr_ray.llm.model import load_for_inference
    from iclr_ray.studies.moee import moee as M

    base, path = served
    texts = ["The dress runs small.", "Great jeans, soft fabric and a good fit for me."]
    got = {}
    for kind in ("hs", "rw", "moee"):
        r = httpx.post(f"{base}/v1/embeddings", json={"model": "moe", "input": texts, "representation": kind},
                       timeout=120)
        assert r.status_code == 200, r.text
        got[kind] = np.array([d["embedding"] for d in r.json()["data"]])
    default = httpx.post(f"{base}/v1/embeddings", json={"model": "moe", "input": texts}, timeout=120)
    np.testing.assert_allclose(np.array([d["embedding"] for d in default.json()["data"]]), got["moee"], atol=1e-6)
    model, tok = load_for_inference(path)
    saved = dict(np.load(f"{path}/{M.STANDARDISE_FILE}"))
    prompt = str(saved.pop("prompt"))
    assert prompt == "title"  # the study's prompt, which the app uses unless told otherwise
    hs, rw = M.Standardiser(**saved).apply(*(lambda e: (e.hs, e.rw))(M.encode(model, tok, texts, prompt=prompt)))
    np.testing.assert_allclose(got["hs"], M.unit(hs), atol=1e-4)
    np.testing.assert_allclose(got["rw"], M.unit(rw), atol=1e-4)
    assert got["rw"].shape == (2, 8) and got["hs"].shape == (2, 64) and got["moee"].shape == (2, 72)
    # the served MoEE vectors' dot product is the paper's sum score at the server's alpha (2), over 1 + alpha
    dot = got["moee"][0] @ got["moee"][1]
    assert dot * 3 == pytest.approx(M.sum_score(hs[:1], rw[:1], hs[1:], rw[1:], 2.0)[0], abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("body, field", [
    ({"model": "moe", "input": "x", "representation": "pooled"}, "representation"),
    ({"model": "moe", "input": []}, "input"),
    ({"model": "other", "input": "x"}, "model"),
])
def test_bad_embedding_requests_are_4xx(served, body, field):
    base, _ = served
    r = httpx.post(f"{base}/v1/embeddings", json=body, timeout=60)
    assert 400 <= r.status_code < 500 and field in r.text
