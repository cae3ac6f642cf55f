"""igcg's candidate scoring: batched against one candidate at a time.

A GCG / I-GCG step scores B candidate suffixes. The study scores them in batches of ``chunk``
through one forward pass each, with the prompt's part before the suffix run once and its key/value
cache expanded over the batch (``gcg.Objective.losses``). The baseline scores the same candidates
one forward pass each (``chunk=1``, the same cache); a third line scores them batched but running
the whole prompt every time (no prefix cache). Same model, dtype, prompt and candidates; one torch
thread. Prints candidates per second each way (median of ``--repeats`` after a warm-up) and the
ratios, and checks that the three agree on every loss.

Run: python benchmarks/igcg_scoring.py [--model smollm2-135m-instruct --dtype bfloat16 --batch 32 --suffix-len 20]
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from iclr_ray.llm.model import build_model, build_tokenizer, load_pretrained  # noqa: E402
from iclr_ray.studies.igcg import gcg  # noqa: E402
from iclr_ray.studies.igcg.config import DEFAULT_TARGETS  # noqa: E402


def uncached_losses(model, lay: gcg.Layout, suffixes: torch.Tensor, chunk: int) -> torch.Tensor:
    """The same losses, the whole prompt run for every candidate (no prefix cache)."""
    T = len(lay.target)
    out = []
    with torch.no_grad():
        for part in suffixes.split(chunk):
            B = len(part)
            ids = torch.cat([torch.tensor(lay.before).expand(B, -1), part, torch.tensor(lay.after).expand(B, -1),
                             torch.tensor(lay.target).expand(B, -1)], dim=1)
            lg = model(input_ids=ids, logits_to_keep=T + 1).logits[:, :T].float()
            out.append(F.cross_entropy(lg.transpose(1, 2), torch.tensor(lay.target).expand(B, -1),
                                       reduction="none").mean(1))
    return torch.cat(out)


def timed(fn, repeats: int) -> tuple[float, torch.Tensor]:
    result = fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct", help="a packaged model, a folder, or tiny-llama")
    ap.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"))
    ap.add_argument("--batch", type=int, default=32, help="candidates per step (B)")
    ap.add_argument("--suffix-len", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    t = DEFAULT_TARGETS[0]
    if a.model == "tiny-llama":
        tok = build_tokenizer([t.message, t.target])
        model = build_model("tiny-llama", tok)
    else:
        model, tok = load_pretrained(a.model)
    model = model.to(getattr(torch, a.dtype)).eval()
    lay = gcg.layout(tok, t.message, t.target)
    allowed = gcg.allowed_tokens(tok, model.get_input_embeddings().weight.shape[0])
    pool = allowed.nonzero().squeeze(1)
    cands = pool[torch.randint(len(pool), (a.batch, a.suffix_len), generator=torch.Generator().manual_seed(0))]
    batched = gcg.Objective(model, lay, chunk=a.batch)
    single = gcg.Objective(model, lay, chunk=1)
    tb, lb = timed(lambda: batched.losses(cands)[0], a.repeats)
    ts, ls = timed(lambda: single.losses(cands)[0], a.repeats)
    tu, lu = timed(lambda: uncached_losses(model, lay, cands, a.batch), a.repeats)
    tol = 1e-4 if a.dtype == "float32" else 5e-2
    agree = torch.allclose(lb, ls, atol=tol, rtol=tol) and torch.allclose(lb, lu, atol=tol, rtol=tol)
    print(f"{a.model} ({a.dtype}), prompt {len(lay.before)} + suffix {a.suffix_len} + {len(lay.after)} + target "
          f"{len(lay.target)} tokens, B = {a.batch}, one thread")
    print(f"  batched, prefix cached (the study):  {a.batch / tb:8.1f} candidates/s")
    print(f"  one at a time, prefix cached:        {a.batch / ts:8.1f} candidates/s")
    print(f"  batched, whole prompt each time:     {a.batch / tu:8.1f} candidates/s")
    print(f"  losses agree across the three: {agree} (max difference {float((lb - ls).abs().max()):.2g}, "
          f"{float((lb - lu).abs().max()):.2g})")
    print(f"ratio batched / one-at-a-time: {ts / tb:.2f}x; prefix cache: {tu / tb:.2f}x")


if __name__ == "__main__":
    main()
