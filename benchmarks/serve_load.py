"""A bounded load test of the generation app (or, with ``--app pad``, the PAD app) on loopback:
throughput and p50/p99 latency with serve.batch on (max_batch_size 8) against off (1), and the
overhead of Serve + HTTP against calling the same decoding in process, all printed as ratios.

Fixed work: ``--requests`` greedy completions of up to ``--max-tokens`` tokens each from a
randomly initialised named model (which rarely emits an end token; the generated tokens are
counted and printed as tokens/s), or from a packaged pretrained model (``--model
smollm2-135m-instruct``: what ``iclr-ray serve generate`` serves by default), ``--concurrency`` in
flight, one replica with one torch thread, on an embedded local Ray.

The PAD app decodes chat requests, each naming one of the pad study's preferences in turn, with
``--prm`` as the personalised reward model (default: the base model's own weights, which costs the
same as a trained PRM of that size).

Run: python benchmarks/serve_load.py [--app generate|pad --model small-llama --prm DIR --requests 64
     --concurrency 8 --max-tokens 16]
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import httpx  # noqa: E402
import torch  # noqa: E402

from iclr_ray.llm import model  # noqa: E402
from iclr_ray.runtime import free_port  # noqa: E402
from iclr_ray.serve import decoding, launch  # noqa: E402

WORDS = "apple river stone cloud maple tiger ember frost lake pine ridge dune".split()



def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


PREFERENCES = ["simple", "excited", "personal"]


def _body(app: str, p: str, i: int, max_tokens: int, name: str) -> dict:
    if app == "pad":
        return {"model": name, "messages": [{"role": "user", "content": p}], "preference": PREFERENCES[i % 3],
                "max_tokens": max_tokens, "temperature": 0}
    return {"model": name, "prompt": p, "max_tokens": max_tokens, "temperature": 0}


async def _load(url: str, prompts: list[str], concurrency: int, max_tokens: int, name: str, app: str) -> dict:
    sem = asyncio.Semaphore(concurrency)
    lat: list[float] = []
    tokens = [0]

    async with httpx.AsyncClient(timeout=300) as client:
        async def one(i: int, p: str) -> None:
            async with sem:
                t0 = time.perf_counter()
                r = await client.post(url, json=_body(app, p, i, max_tokens, name))
                r.raise_for_status()
                lat.append(time.perf_counter() - t0)
                tokens[0] += r.json()["usage"]["completion_tokens"]

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
        wall = time.perf_counter() - t0
    return {"rps": len(prompts) / wall, "tps": tokens[0] / wall, "p50": _pct(lat, 0.5), "p99": _pct(lat, 0.99)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--app", choices=("generate", "pad"), default="generate")
    ap.add_argument("--model", default="small-llama")
    ap.add_argument("--prm", help="pad: the PRM checkpoint (default: the base model's own weights)")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args()

    import ray
    from ray import serve

    from iclr_ray.llm import pretrained

    torch.set_num_threads(1)
    prompts = [f"{WORDS[i % 12]} {WORDS[(i * 5) % 12]} {WORDS[(i * 7) % 12]}" for i in range(args.requests)]
    if args.model in pretrained.PACKAGED:  # a real packaged model, served by its name
        net, tok = pretrained.load(args.model)
        net.eval()
        ckpt = args.model
        # an instruct model ends a bare text prompt at once: the prompts go through its chat template
        prompts = [tok.apply_chat_template([{"role": "user", "content": f"Write one sentence about a {w} and a "
                                                                       f"{WORDS[(i * 5) % 12]}."}],
                                           tokenize=False, add_generation_prompt=True)
                   for i, w in enumerate(WORDS[i % 12] for i in range(args.requests))]
    else:
        tok = model.build_tokenizer([" ".join(WORDS)] * 20, vocab_size=300)
        net = model.build_model(args.model, tok, seed=0).eval()
        ckpt = tempfile.mkdtemp(prefix="serve_bench")
        net.save_pretrained(ckpt)
        tok.save_pretrained(ckpt)
    if args.app == "pad":  # chat requests: the prompts are the user's messages
        prompts = [f"Tell me about a {WORDS[i % 12]} and a {WORDS[(i * 5) % 12]}." for i in range(args.requests)]
        prm_path = args.prm or ckpt
        prm = model.load_pretrained(prm_path)[0].eval() if args.prm else net
    # In process: the same decode, one request at a time
    params = decoding.SamplingParams(max_tokens=args.max_tokens, temperature=0)
    inproc = []
    for i, p in enumerate(prompts[:16]):
        t0 = time.perf_counter()
        if args.app == "pad":
            from iclr_ray.studies.pad.data import preference_text
            from iclr_ray.studies.pad.decoding import PADStrategy
            from iclr_ray.studies.pad.evaluate import chat_ids, personalised

            strategy = PADStrategy(prm, [chat_ids(tok, personalised(p, preference_text(PREFERENCES[i % 3])))],
                                   pad_id=tok.pad_token_id or 0)
            decoding.generate(net, tok, [chat_ids(tok, p)], [params], strategy)
        else:
            decoding.generate(net, tok, [tok(p).input_ids], [params])
        inproc.append(time.perf_counter() - t0)

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    port = free_port()
    rows = {}
    try:
        for label, batch in (("batching off (max_batch_size 1)", 1), ("batching on (max_batch_size 8)", 8)):
            extra = {"prm": prm_path} if args.app == "pad" else {}
            launch.start(args.app, {"model": ckpt, "served_name": "bench", "max_batch_size": batch,
                                    "batch_wait_timeout_s": 0.01, "ray_actor_options": {"num_cpus": 1}, **extra},
                         {"host": "127.0.0.1", "port": port})
            route = "/v1/chat/completions" if args.app == "pad" else "/v1/completions"
            url = f"http://127.0.0.1:{port}{route}"
            asyncio.run(_load(url, prompts[:4], 1, args.max_tokens, "bench", args.app))  # warm-up
            if batch == 1:
                rows["sequential over HTTP (concurrency 1)"] = asyncio.run(
                    _load(url, prompts[:16], 1, args.max_tokens, "bench", args.app))
            rows[label] = asyncio.run(_load(url, prompts, args.concurrency, args.max_tokens, "bench", args.app))
            serve.delete(args.app)
    finally:
        serve.shutdown()
        ray.shutdown()

    print(f"app {args.app}: {args.requests} requests x {args.max_tokens} tokens, concurrency {args.concurrency}, "
          f"model {args.model}")
    print(f"{'':40s} {'req/s':>7s} {'tok/s':>7s} {'p50 ms':>8s} {'p99 ms':>8s}")
    print(f"{'in process, one at a time':40s} {1 / statistics.mean(inproc):7.2f} {'':>7s} "
          f"{1000 * _pct(inproc, 0.5):8.1f} {1000 * _pct(inproc, 0.99):8.1f}")
    for label, r in rows.items():
        print(f"{label:40s} {r['rps']:7.2f} {r['tps']:7.1f} {1000 * r['p50']:8.1f} {1000 * r['p99']:8.1f}")
    on, off = rows["batching on (max_batch_size 8)"], rows["batching off (max_batch_size 1)"]
    seq = rows["sequential over HTTP (concurrency 1)"]
    print(f"throughput, batching on / off: {on['rps'] / off['rps']:.2f}x; p99 latency on / off: "
          f"{on['p99'] / off['p99']:.2f}x")
    print(f"Serve + HTTP overhead per request (sequential): {1000 * (seq['p50'] - _pct(inproc, 0.5)):.1f} ms, "
          f"{seq['p50'] / _pct(inproc, 0.5):.2f}x the in-process latency")


if __name__ == "__main__":
    main()
