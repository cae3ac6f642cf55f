"""The serving apps as users meet them: real Ray Serve apps on 127.0.0.1 (on the session's Ray
cluster), a checkpoint trained by the backbone's Ray Train loop, and a real HTTP client."""
import asyncio
import json
import time

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from iclr_ray.llm import data, model, train  # noqa: E402
from iclr_ray.runtime import free_port  # noqa: E402

pytestmark = pytest.mark.slow

CHATS = [[{"role": "user", "content": f"say {w} twice"}, {"role": "assistant", "content": f"{w} {w}"}]
         for w in ["apple", "river", "stone", "cloud", "maple", "tiger", "ember", "frost"] * 6]



@pytest.fixture(scope="module")
def served(ray_cluster, tmp_path_factory, wait_serving):
    """A tiny chat model trained for a few steps through llm.train.fit, served from its run
    directory by the generation app, and the MiniLM embedding app beside it."""
    from ray import serve

    from iclr_ray.serve import launch

    store = tmp_path_factory.mktemp("sft")
    tok = model.build_tokenizer([m["content"] for c in CHATS for m in c], vocab_size=300)
    rows = data.pack(data.encode_all(tok, CHATS, 64), 64, tok.pad_token_id)
    res = train.fit(train.TrainConfig(max_steps=3, num_workers=1, lr=3e-3), rows, tok, store, "sft")
    assert res.error is None
    port = free_port()
    http = {"host": "127.0.0.1", "port": port}
    opts = {"ray_actor_options": {"num_cpus": 0.5}}
    launch.check_model("generate", str(store / "sft"))
    launch.start("generate", {"model": str(store / "sft"), "served_name": "tiny-sft", "max_batch_size": 4,
                              "batch_wait_timeout_s": 0.05, **opts}, http)
    launch.start("embed", {**opts}, http, route_prefix="/embed")
    base = f"http://127.0.0.1:{port}"
    wait_serving(base)
    with res.checkpoint.as_directory() as d:
        local, local_tok = model.load_pretrained(f"{d}/model")
    try:
        yield {"base": base, "model": local, "tokenizer": local_tok}
    finally:
        serve.shutdown()


def _post(base, path, body, **kw):
    return httpx.post(f"{base}{path}", json=body, timeout=120, **kw)


def test_models_lists_the_served_name(served):
    r = httpx.get(f"{served['base']}/v1/models", timeout=30)
    assert r.status_code == 200 and [m["id"] for m in r.json()["data"]] == ["tiny-sft"]


def test_greedy_completion_matches_in_process_decoding(served):
    from iclr_ray.serve.decoding import SamplingParams, generate

    prompt = "say river"
    r = _post(served["base"], "/v1/completions", {"model": "tiny-sft", "prompt": prompt, "max_tokens": 12,
                                                  "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    tok = served["tokenizer"]
    expected = generate(served["model"], tok, [tok(prompt).input_ids], [SamplingParams(12, temperature=0)])[0]
    assert body["choices"][0]["text"] == expected[0] and body["choices"][0]["finish_reason"] == expected[1]
    assert body["usage"]["completion_tokens"] == expected[2] and body["object"] == "text_completion"


def test_chat_streaming_equals_the_whole_answer_and_seeds_repeat(served):
    msgs = [{"role": "user", "content": "say stone twice"}]
    whole = _post(served["base"], "/v1/chat/completions", {"model": "tiny-sft", "messages": msgs, "temperature": 0,
                                                          "max_tokens": 10}).json()
    text = whole["choices"][0]["message"]["content"]
    chunks = []
    with httpx.stream("POST", f"{served['base']}/v1/chat/completions", timeout=120,
                      json={"model": "tiny-sft", "messages": msgs, "temperature": 0, "max_tokens": 10,
                            "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    for e in events[:-1]:
        chunk = json.loads(e)
        assert chunk["object"] == "chat.completion.chunk"
        chunks.append(chunk["choices"][0]["delta"].get("content", ""))
    assert "".join(chunks) == text
    assert json.loads(events[-2])["choices"][0]["finish_reason"] in ("stop", "length")

    sampled = [_post(served["base"], "/v1/chat/completions",
                     {"model": "tiny-sft", "messages": msgs, "temperature": 1.0, "top_p": 0.9, "seed": s,
                      "max_tokens": 10}).json()["choices"][0]["message"]["content"] for s in (1, 1, 2, 3)]
    assert sampled[0] == sampled[1]
    assert len(set(sampled)) > 1


def test_stop_strings_and_max_tokens_are_honoured(served):
    first = _post(served["base"], "/v1/completions", {"model": "tiny-sft", "prompt": "say maple", "max_tokens": 12,
                                                      "temperature": 0}).json()["choices"][0]
    text = first["text"]
    if len(text) >= 3:
        stop = text[2:4]
        cut = _post(served["base"], "/v1/completions", {"model": "tiny-sft", "prompt": "say maple",
                                                        "max_tokens": 12, "temperature": 0, "stop": [stop]}).json()
        assert cut["choices"][0]["text"] == text[:text.find(stop)] and cut["choices"][0]["finish_reason"] == "stop"
    short = _post(served["base"], "/v1/completions", {"model": "tiny-sft", "prompt": "say maple", "max_tokens": 1,
                                                      "temperature": 0}).json()
    assert short["usage"]["completion_tokens"] <= 1


def test_concurrent_requests_are_batched_without_changing_answers(served):
    prompts = [f"say {w}" for w in ("apple", "river", "stone", "cloud", "tiger", "ember")]

    async def all_at_once():
        async with httpx.AsyncClient(timeout=120) as client:
            return await asyncio.gather(*(client.post(f"{served['base']}/v1/completions", json={
                "model": "tiny-sft", "prompt": p, "max_tokens": 8, "temperature": 0}) for p in prompts))

    together = [r.json()["choices"][0]["text"] for r in asyncio.run(all_at_once())]
    alone = [_post(served["base"], "/v1/completions", {"model": "tiny-sft", "prompt": p, "max_tokens": 8,
                                                       "temperature": 0}).json()["choices"][0]["text"]
             for p in prompts]
    assert together == alone


@pytest.mark.parametrize("path, body, status, param", [
    ("/v1/completions", b'{"model": "tiny-sft", "prompt": ', 400, None),
    ("/v1/completions", {"model": "tiny-sft"}, 400, "prompt"),
    ("/v1/completions", {"model": "tiny-sft", "prompt": "hi", "max_tokens": "ten"}, 400, "max_tokens"),
    ("/v1/completions", {"model": "nope", "prompt": "hi"}, 404, "model"),
    ("/v1/completions", {"model": "tiny-sft", "prompt": "hi", "max_tokens": 5000}, 400, "max_tokens"),
    ("/v1/completions", {"model": "tiny-sft", "prompt": "hi", "temperature": -1}, 400, "temperature"),
    ("/v1/completions", {"model": "tiny-sft", "prompt": ""}, 400, "prompt"),
    ("/v1/chat/completions", {"model": "tiny-sft", "messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"model": "tiny-sft", "messages": [{"role": "robot", "content": "x"}]}, 400,
     "messages.0.role"),
    ("/embed/v1/embeddings", {"model": "all-MiniLM-L6-v2", "input": []}, 400, "input"),
    ("/embed/v1/embeddings", {"model": "all-MiniLM-L6-v2", "input": "word " * 600}, 400, "input"),
    ("/embed/v1/embeddings", {"model": "all-MiniLM-L6-v2", "input": "x", "representation": "rw"}, 400,
     "representation"),
])
def test_bad_requests_get_openai_style_4xx_and_the_server_keeps_serving(served, path, body, status, param):
    kw = {"content": body, "headers": {"content-type": "application/json"}} if isinstance(body, bytes) \
        else {"json": body}
    r = httpx.post(f"{served['base']}{path}", timeout=60, **kw)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["message"] and err["type"] == "invalid_request_error" and err["param"] == param
    ok = _post(served["base"], "/v1/completions", {"model": "tiny-sft", "prompt": "hi", "max_tokens": 2})
    assert ok.status_code == 200


def test_embeddings_are_unit_vectors_that_rank_similar_text_closer(served):
    r = _post(served["base"], "/embed/v1/embeddings", {"model": "all-MiniLM-L6-v2", "input": [
        "A cat sits on the mat.", "A kitten is resting on a rug.", "Stock markets fell sharply today."]})
    assert r.status_code == 200, r.text
    vecs = [d["embedding"] for d in r.json()["data"]]
    assert [len(v) for v in vecs] == [384] * 3
    dot = [[sum(a * b for a, b in zip(u, v)) for v in vecs] for u in vecs]
    assert all(abs(dot[i][i] - 1) < 1e-4 for i in range(3))
    assert dot[0][1] > dot[0][2] + 0.2


def test_a_killed_replica_is_restarted_by_serve(served):
    import ray
    from ray.util.state import list_actors

    def replicas():
        return [a for a in list_actors(filters=[("state", "=", "ALIVE")], limit=1000)
                if "Generator" in (a.class_name or "") and "Replica" in (a.class_name or "")]

    before = replicas()
    assert before
    ray.kill(ray.get_actor(before[0].name, namespace="serve"), no_restart=True)
    deadline = time.monotonic() + 120
    ok = False
    while time.monotonic() < deadline and not ok:
        try:
            ok = _post(served["base"], "/v1/completions", {"model": "tiny-sft", "prompt": "hi",
                                                           "max_tokens": 2}).status_code == 200
        except httpx.HTTPError:
            pass
        alive = {a.actor_id for a in replicas()}
        ok = ok and bool(alive) and before[0].actor_id not in alive
        time.sleep(0.5)
    assert ok, "no new replica served within 120 s"


def test_serve_generate_without_a_model_serves_smollm2_with_its_chat_template(served):
    """A new user's one command: the packaged SmolLM2-135M-Instruct (real weights, offline) behind
    the same OpenAI API, answering a chat through the model's own chat template."""
    from iclr_ray.config import ConfigError
    from iclr_ray.llm import pretrained
    from iclr_ray.serve import launch

    name = launch.default_model("generate", None)
    try:
        launch.check_model("generate", name)
    except ConfigError as exc:
        pytest.skip(str(exc))
    pretrained.ensure_converted(name)  # once per machine (the session's cache); the replica then loads it
    port = int(served["base"].rsplit(":", 1)[1])
    launch.start("generate", {"model": name, "ray_actor_options": {"num_cpus": 0.5}},
                 {"host": "127.0.0.1", "port": port}, name="default", route_prefix="/default")
    base = f"{served['base']}/default"
    assert [m["id"] for m in httpx.get(f"{base}/v1/models", timeout=60).json()["data"]] == [name]
    r = _post(base, "/v1/chat/completions", {"model": name, "temperature": 0, "max_tokens": 12,
                                             "messages": [{"role": "user", "content": "What is the capital of France?"}]})
    assert r.status_code == 200, r.text
    assert "Paris" in r.json()["choices"][0]["message"]["content"]
