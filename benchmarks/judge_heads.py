"""What badjudge's judge training costs against the plain way of fine-tuning the same judges.

Same judges either way: the top ``--blocks`` blocks (and final norm) of the model trained on
``--judges`` training sets of pointwise prompts, batch ``--batch``, AdamW, one torch thread.

- plain: each judge is the whole causal LM with its lower blocks frozen (``requires_grad`` off, so
  no backward through them), trained on left-padded token ids with logits at the last position
  only: every step runs every block forward, per judge;
- badjudge: the frozen blocks' hidden states computed once per prompt (``judge.trunk_features``),
  then all judges trained side by side as a stack of heads on those states (``JudgeRecipe``).

Prints seconds per optimiser step of all judges both ways (median after a warm-up step), the
one-off feature cost, and the ratio; and the break-even number of steps.

Run: python benchmarks/judge_heads.py [--model smollm2-135m-instruct --blocks 2 --judges 4 --steps 4 --batch 16]
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from iclr_ray.llm.loss import step_loss  # noqa: E402
from iclr_ray.llm.model import build_model, build_tokenizer, load_pretrained  # noqa: E402
from iclr_ray.llm.recipe import TrainConfig, optimizer_and_schedule  # noqa: E402
from iclr_ray.studies.badjudge import data, judge  # noqa: E402
from iclr_ray.studies.badjudge.data import FORMATS  # noqa: E402
from iclr_ray.studies.badjudge.recipe import JudgeRecipe  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct", help="a packaged model, a folder, or tiny-llama")
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--judges", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.model == "tiny-llama":
        tok = build_tokenizer(data.vocabulary_texts())
        model = build_model("tiny-llama", tok)
    else:
        model, tok = load_pretrained(a.model)
    model.eval()
    n = a.batch * a.steps
    exs = data.pointwise(n, np.random.default_rng(0))
    enc = [data.encode(tok, e.prompt, FORMATS["pointwise"].choices) for e in exs]
    ids, cids = [i for i, _ in enc], enc[0][1]
    labels = [cids[FORMATS["pointwise"].choices.index(e.label)] for e in exs]
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    cfg = TrainConfig(model="x", micro_batch_size=a.batch, num_workers=1, max_steps=a.steps, lr=1e-4, grad_clip=0)

    # plain: one whole model per judge, lower blocks frozen, token ids in
    from iclr_ray.studies.pad.prm import freeze_below

    plain = []
    for _ in range(a.judges):
        import copy

        m = copy.deepcopy(model).train()
        freeze_below(m, a.blocks)
        m.get_output_embeddings().weight.requires_grad_(False)
        plain.append((m, optimizer_and_schedule(m, cfg)[0]))
    times = []
    for step in range(a.steps):
        lo = step * a.batch
        width = max(len(x) for x in ids[lo:lo + a.batch])
        x = torch.full((a.batch, width), pad)
        mask = torch.zeros((a.batch, width), dtype=torch.long)
        for r, row in enumerate(ids[lo:lo + a.batch]):  # left-padded: every row's verdict at the last position
            x[r, width - len(row):], mask[r, width - len(row):] = torch.tensor(row), 1
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        y = torch.tensor(labels[lo:lo + a.batch])
        t0 = time.perf_counter()
        for m, opt in plain:
            opt.zero_grad()
            last = m(input_ids=x, attention_mask=mask, position_ids=pos, use_cache=False, logits_to_keep=1).logits[:, -1]
            torch.nn.functional.cross_entropy(last, y, reduction="sum").div(a.batch).backward()
            opt.step()
        times.append(time.perf_counter() - t0)
    plain_step = statistics.median(times[1:] or times)
    del plain

    # badjudge: features once, then the heads side by side
    t0 = time.perf_counter()
    feats = judge.trunk_features(model, a.blocks, ids, pad)
    feature_s = time.perf_counter() - t0
    keys = [e.prompt for e in exs]
    rows = list(zip(keys, labels))
    rec = JudgeRecipe([(f"j{j}", rows) for j in range(a.judges)], dict(zip(keys, feats)),
                      judge.head_state_of(model, a.blocks), model.get_output_embeddings().weight.detach().clone(),
                      judge.head_config(model.config, a.blocks))
    rec.setup()
    stack = rec.build_model(cfg).train()
    opt = optimizer_and_schedule(stack, cfg)[0]
    times = []
    for step in range(a.steps):
        batches = rec.step_batches(step, cfg)
        units = sum(rec.units(b) for b, _ in batches)
        t0 = time.perf_counter()
        opt.zero_grad()
        for b, _ in batches:
            step_loss(rec.loss(stack, b), units).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    heads_step = statistics.median(times[1:] or times)

    print(f"model {a.model}, top {a.blocks} of {model.config.num_hidden_layers} blocks, {a.judges} judges, "
          f"batch {a.batch}, mean prompt {np.mean([len(i) for i in ids]):.1f} tokens")
    print(f"plain (whole model per judge, lower blocks frozen): {plain_step:.3f} s per step of all judges")
    print(f"badjudge heads on cached features:                 {heads_step:.3f} s per step of all judges "
          f"(+ {feature_s:.2f} s once for {n} prompts' features, {feature_s / n * 1000:.1f} ms each)")
    print(f"ratio plain / heads: {plain_step / heads_step:.2f}x per step")
    per_prompt = feature_s / n
    saved = (plain_step - heads_step) / a.batch  # per prompt per epoch of all the judges
    print(f"break-even: the features cost what {per_prompt / saved:.2f} epochs of these judges save" if saved > 0
          else "break-even: never (the heads are no faster per step)")


if __name__ == "__main__":
    main()
