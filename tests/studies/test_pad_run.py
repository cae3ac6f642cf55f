"""pad end to end on the session's Ray cluster: the smoke study (samples, pairs, the PRMs on Ray
Train, decoding tasks, claims, figures), then its PRM served by the pad app over real HTTP on
127.0.0.1 (PAD replies equal in-process PAD decoding, batched requests with different preferences
equal each alone, malformed requests get 4xx); and the input errors that stop a run before Ray."""
import asyncio
import json

import pytest

pytest.importorskip("deepspeed")
pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from iclr_ray import cli  # noqa: E402
from iclr_ray.runtime import free_port  # noqa: E402


def test_paper_preset_refuses_to_start_without_real_prompts_and_pairs(input_error):
    line = input_error("pad", [], preset="paper")  # exit 2, one line, nothing written
    assert "data.prompts_jsonl" in line and "pairs" not in line  # the released PRM needs no pairs
    line = input_error("pad", ["models.prm=null"], preset="paper")  # a PRM to train needs real pairs
    assert "data.prompts_jsonl" in line and "data.pairs_jsonl" in line


def test_input_errors_exit_2_before_ray(input_error, tmp_path):
    assert "unknown preference 'formal'" in input_error("pad", ["decode.preferences=['formal']"])
    assert "combines a preference not in" in input_error("pad", ["decode.preferences=['simple']",
                                                                  "decode.unseen=['simple+excited']"])
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hi"}\n{"prompt": 3}\n')
    assert f"{prompts}:2" in input_error("pad", [f"data.prompts_jsonl={prompts}"])
    assert "is not a model checkpoint" in input_error("pad", [f"models.base={tmp_path}"])
    assert "held-out queries asked for" in input_error("pad", ["data.eval_queries=5000"])
    assert "mixes the study's preferences" in input_error("pad", ["decode.preference_texts={helpful: Be helpful.}",
                                                                 "decode.preferences=[simple, helpful]",
                                                                 "decode.unseen=[simple+helpful]"])
    assert "decode.reward_models.helpful" in input_error("pad", [f"decode.reward_models={{helpful: {tmp_path}}}"])


def test_reward_model_jobs_collect_every_reply_a_part_needs():
    from iclr_ray.studies.pad.run import reward_model_jobs

    rec = lambda *t: {"texts": list(t)}  # noqa: E731
    base = {"base": rec("b0", "b1"), "prompting": {"helpful": rec("p0", "p1"), "humor": rec("h0", "h1"),
                                                   "helpful+humor": rec("c0", "c1")}}
    prm = {"pad": {"helpful": rec("x0", "b1"), "humor": rec("y0", "y1")}, "bon": {"helpful": rec("z0", "z1")},
           "sweep": {"helpful": {"0.0": ["b0", "b1"]}}}
    jobs = reward_model_jobs(base, [prm], ["helpful", "humor", "helpful+humor"], {"helpful": "rm"})
    assert jobs == {"helpful": [["b0", "c0", "p0", "x0", "z0"], ["b1", "c1", "p1", "z1"]]}


@pytest.fixture(scope="module")
def smoke_run(ray_cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("pad") / "run"
    assert cli.main(["run", "pad", "--preset", "smoke", "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_smoke_study_reports_every_claim_and_figure(smoke_run):
    result = json.loads((smoke_run / "result.json").read_text())
    m = result["metrics"]
    assert {r["kind"] for r in m["prms"]} == {"real", "shuffled"} and m["pairs"]["n"] > 0
    for t in m["training"]:  # DPO starts at log 2, and so does ARGS's reward model (its head starts at zero)
        assert t["curve"] and abs(t["curve"][0]["loss"] - 0.6931) < 1e-3
    rms = [t for t in m["training"] if t["kind"] == "rm"]
    assert len(rms) == 1 and 0.0 <= rms[0]["accuracy"] <= 1.0
    real = next(r for r in m["prms"] if r["kind"] == "real")
    assert set(real["pad"]) == {"simple", "excited", "personal", "excited+personal"}
    assert all(len(r["texts"]) == len(m["queries"]) for r in real["pad"].values())
    # the fluency guard: the base's NLL per token of every reply it reads; the PRM decoded alone
    assert all(len(r["nll"]) == len(m["queries"]) for r in real["pad"].values())
    assert len(m["base"]["base"]["nll"]) == len(m["queries"]) and set(real["prm_direct"]) == {"simple", "excited",
                                                                                                "personal"}
    # ARGS beside PAD on the trained preferences, its weight chosen on the dev queries as PAD's
    assert set(real["args"]) == {"simple", "excited", "personal"}
    assert all(len(r["texts"]) == len(m["queries"]) and len(r["nll"]) == len(m["queries"]) for r in real["args"].values())
    assert m["settings"]["args_w_chosen"] == "dev" and m["settings"]["args_w"] in (0.0, 1.0)
    assert set(m["dev"]["args_sweep"]) == {"simple", "excited", "personal"}
    ids = {c["id"] for c in result["claims"]}
    assert {"beats_base_simple", "beats_prompting_personal", "unseen_excited_personal", "needs_learned_preference",
            "personalised", "beats_best_of_n", "gate_speeds_up", "beats_prm_direct_personal",
            "beats_args_personal"} <= ids
    # the random tiny model's replies often decode to nothing (no NLL): the guard is claimed where they do not
    spoken = any(b and p for b, p in zip(m["base"]["base"]["texts"], real["pad"]["simple"]["texts"]))
    assert ("fluency_kept_simple" in ids) == spoken
    assert m["settings"]["w_chosen"] == "dev" and m["settings"]["w"] in (0.0, 1.0) and len(m["dev"]["queries"]) == 3
    checks = {c["id"]: c for c in result["checks"]}
    assert checks["w0_is_base"]["holds"] is True and checks["k1_is_base"]["holds"] is True
    assert {p.stem for p in (smoke_run / "plots").glob("*.png")} == {"alignment", "weight_sweep", "prm_training",
                                                                     "cost"}
    assert "PAD" in (smoke_run / "report.md").read_text()


@pytest.mark.slow
def test_the_pad_app_serves_the_trained_prm(smoke_run, wait_serving):
    from ray import serve

    from iclr_ray.llm.model import load_pretrained
    from iclr_ray.serve import launch
    from iclr_ray.studies.pad import data as pdata
    from iclr_ray.studies.pad.decoding import PADStrategy
    from iclr_ray.studies.pad.evaluate import chat_ids, personalised_messages
    from iclr_ray.serve.decoding import SamplingParams, generate

    m = json.loads((smoke_run / "result.json").read_text())["metrics"]
    prm_dir = next(t["model"] for t in m["training"] if t["kind"] == "real")
    base_dir = str(smoke_run / "base_model")
    port = free_port()
    args = {"model": base_dir, "prm": prm_dir, "served_name": "pad-smoke", "k": 5, "w": 4.0, "max_batch_size": 4,
            "batch_wait_timeout_s": 0.05, "ray_actor_options": {"num_cpus": 0.5}}
    launch.check_app_args("pad", args)
    launch.start("pad", args, {"host": "127.0.0.1", "port": port}, route_prefix="/")
    url = f"http://127.0.0.1:{port}"
    wait_serving(url)
    try:
        base, tok = load_pretrained(base_dir)
        prm, _ = load_pretrained(prm_dir)
        prefs = ["simple", "excited", "personal", "Answer as a pirate would."]
        chats = [[{"role": "user", "content": f"Tell me about {t}."}] for t in ("chess", "soup", "tennis", "yoga")]

        def local(msgs, pref):
            (pers,) = personalised_messages(msgs, pdata.preference_text(pref))
            prm_ids = chat_ids(tok, pers["content"])  # the base reads the preference too (the official setup)
            strat = PADStrategy(prm.eval(), [prm_ids], k=5, w=4.0, pad_id=tok.pad_token_id)
            return generate(base.eval(), tok, [prm_ids], [SamplingParams(max_tokens=6, temperature=0)], strat)[0][0]

        def body(msgs, pref):
            return {"model": "pad-smoke", "messages": msgs, "preference": pref, "max_tokens": 6, "temperature": 0}

        alone = []
        for msgs, pref in zip(chats, prefs):
            r = httpx.post(f"{url}/v1/chat/completions", json=body(msgs, pref), timeout=120)
            assert r.status_code == 200, r.text
            alone.append(r.json()["choices"][0]["message"]["content"])
            assert alone[-1] == local(msgs, pref)

        async def together():
            async with httpx.AsyncClient(timeout=120) as client:
                return await asyncio.gather(*(client.post(f"{url}/v1/chat/completions", json=body(msgs, pref))
                                              for msgs, pref in zip(chats, prefs)))

        assert [r.json()["choices"][0]["message"]["content"] for r in asyncio.run(together())] == alone

        for bad, status, param in (({"model": "pad-smoke", "messages": chats[0]}, 400, "preference"),
                                   (body(chats[0], "   "), 400, "preference"),
                                   ({**body(chats[0], "simple"), "model": "other"}, 404, "model"),
                                   ({**body(chats[0], "simple"), "n": 2}, 400, "n")):
            r = httpx.post(f"{url}/v1/chat/completions", json=bad, timeout=60)
            assert r.status_code == status and r.json()["error"]["param"] == param, r.text
        assert httpx.post(f"{url}/v1/chat/completions", json=body(chats[0], "simple"), timeout=60).status_code == 200
    finally:
        serve.shutdown()
