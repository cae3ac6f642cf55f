"""Step time of the Ray Train + DeepSpeed SFT loop against a bare single-process torch loop.

Same model (a named tiny Llama, same seed), same packed rows per optimiser step, same loss
(per-token step loss), one torch thread per process. The bare loop is plain torch AdamW; the Ray
side is ``iclr_ray.llm.train.fit`` with one worker (the overhead of Ray Train + DeepSpeed) and with
two workers on the same global batch (data parallel over the machine's cores). Steady state: the
bare loop's median step after warm-up, Ray's last reported step (its start-up per fit is
printed separately). Also prints the packing efficiency of the data.

Run: python benchmarks/sft_train_step.py [--model tiny-llama --steps 12 --rows 8 --seq 256 --zero 2]
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import argparse  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from iclr_ray.llm import data, loss, model, recipe, train  # noqa: E402


def corpus(seq: int):
    chats = [[{"role": "user", "content": f"What is {a} plus {b}? Show the sum."},
              {"role": "assistant", "content": f"{a} plus {b} equals {a + b}."}]
             for a in range(40) for b in range(25)]
    tok = model.build_tokenizer([m["content"] for c in chats for m in c], vocab_size=512)
    rows = data.pack(data.encode_all(tok, chats, seq), seq, tok.pad_token_id)
    return tok, rows


def bare_loop(cfg: train.TrainConfig, rows, tok) -> float:
    """Median seconds per optimiser step of a plain single-process loop."""
    torch.set_num_threads(1)
    net = model.build_model(cfg.model, tok, seed=cfg.seed)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, betas=cfg.betas)
    times = []
    for step in range(cfg.max_steps):
        t0 = time.perf_counter()
        step_rows = recipe.step_rows(rows, step, cfg, cfg.seed)
        micro = [step_rows[i:i + cfg.micro_batch_size] for i in range(0, len(step_rows), cfg.micro_batch_size)]
        step_tokens = sum(loss.label_tokens(data.collate(m)["labels"]) for m in micro)
        for m in micro:
            b = data.collate(m)
            logits = net(input_ids=b["input_ids"], position_ids=b["position_ids"], use_cache=False).logits
            total, _ = loss.summed_token_loss(logits, b["labels"])
            loss.step_loss(total, step_tokens).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[3:])


def ray_loop(cfg: train.TrainConfig, rows, tok, store: str, name: str) -> tuple[float, float]:
    """(seconds per step at the last step, seconds for the whole fit)."""
    t0 = time.perf_counter()
    result = train.fit(cfg, rows, tok, store, name)
    if result.error:
        raise result.error
    return cfg.rows_per_step() / result.metrics["samples_per_s"], time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--rows", type=int, default=8, help="packed rows per optimiser step (global)")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--zero", type=int, default=2)
    args = p.parse_args()

    import ray

    tok, rows = corpus(args.seq)
    print(f"{len(rows)} packed rows of {args.seq} tokens, packing efficiency {data.packing_efficiency(rows):.3f}")
    base = dict(model=args.model, max_steps=args.steps, zero_stage=args.zero, grad_accum=1)
    one = train.TrainConfig(**base, num_workers=1, micro_batch_size=args.rows)
    two = train.TrainConfig(**base, num_workers=2, micro_batch_size=args.rows // 2)
    bare = bare_loop(one, rows, tok)
    ray.init(address="local", num_cpus=2, log_to_driver=False, runtime_env={"env_vars": {
        "OMP_NUM_THREADS": "1", "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1"}})
    with tempfile.TemporaryDirectory() as store:
        r1, fit1 = ray_loop(one, rows, tok, store, "one")
        r2, fit2 = ray_loop(two, rows, tok, store, "two")
    ray.shutdown()
    tokens = args.rows * args.seq
    print(f"{'loop (Ray: last step; bare: median)':44s} {'s/step':>8s} {'tokens/s':>9s} {'vs bare':>8s}")
    for label, secs in (("bare torch, 1 process", bare),
                        (f"Ray Train + DeepSpeed ZeRO-{args.zero}, 1 worker", r1),
                        (f"Ray Train + DeepSpeed ZeRO-{args.zero}, 2 workers", r2)):
        print(f"{label:44s} {secs:8.3f} {tokens / secs:9.0f} {secs / bare:7.2f}x")
    print(f"overhead of Ray Train + DeepSpeed at 1 worker: {100 * (r1 / bare - 1):+.1f}% per step "
          f"(fit start-up and teardown: {fit1:.0f} s and {fit2:.0f} s in total)")


if __name__ == "__main__":
    main()
