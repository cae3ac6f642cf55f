"""What AFA costs on CPU, against its baselines in the same run.

The study's small experts (16 x 16 class-conditional U-Nets (16, 32), three of them) and its SABW
aggregators (hidden 16), one thread, the same weights and batch for every row. Median seconds over
``--repeats`` after a warm-up, with the ratio to the baseline named in each row:
- an aggregator training step (forward through the frozen experts and every aggregator, backward
  through both into the aggregators) vs one expert's fine-tuning step: what ensembling N experts
  at every block costs to train;
- an ensemble forward (no grad) vs the uniform output average (each expert's own forward, averaged)
  vs one expert: what the aggregators add at inference;
- DDIM sampling with CFG of AFA vs of the uniform average.

Run: python benchmarks/afa_cost.py
     python benchmarks/afa_cost.py --batch 64 --repeats 10 --experts 2
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402

import torch  # noqa: E402

from iclr_ray.diffusion.model import NULL  # noqa: E402
from iclr_ray.diffusion.sampling import ddpm, sample  # noqa: E402
from iclr_ray.studies.afa import data as D  # noqa: E402
from iclr_ray.studies.afa.afa import ensemble_loss, output_average  # noqa: E402
from iclr_ray.studies.afa.config import Config  # noqa: E402
from iclr_ray.studies.afa.run import build_afa, build_expert, recipe_dict  # noqa: E402
from _timing import timed  # noqa: E402  (benchmarks/_timing.py)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--experts", type=int, default=3)
    ap.add_argument("--sample-steps", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    c = recipe_dict(Config())
    side = c["data"]["side"]
    experts = [build_expert(c, i).eval() for i in range(args.experts)]
    model = build_afa(c, experts, 0).train()
    one = build_expert(c, 99).train()
    sched = ddpm()
    g = torch.Generator().manual_seed(0)
    x0 = torch.rand(args.batch, 1, side, side, generator=g) * 2 - 1
    tokens = torch.randint(1, D.CLASSES + 1, (args.batch, 1), generator=g)
    t = torch.randint(0, 1000, (args.batch,), generator=g)
    noise = torch.randn(x0.shape, generator=g)
    opt_afa = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], 1e-3)
    opt_one = torch.optim.AdamW(one.parameters(), 1e-3)

    def step(opt, fn):
        opt.zero_grad()
        ensemble_loss(fn, sched, x0, tokens, t, noise).mean().backward()
        opt.step()

    uniform = output_average(experts)
    rows = []
    expert_step = timed(lambda: step(opt_one, lambda x, tt, tok: one(x, tt, one.context(tok))), args.repeats)
    afa_step = timed(lambda: step(opt_afa, model), args.repeats)
    rows += [("expert fine-tuning step", expert_step, "1.00x (baseline)"),
             (f"AFA aggregator step, {args.experts} experts", afa_step,
              f"{afa_step / expert_step:.2f}x the expert step")]
    model.eval()
    xt = noise
    with torch.no_grad():
        f_one = timed(lambda: experts[0](xt, t, experts[0].context(tokens)), args.repeats)
        f_uni = timed(lambda: uniform(xt, t, tokens), args.repeats)
        f_afa = timed(lambda: model(xt, t, tokens), args.repeats)
    rows += [("forward: one expert", f_one, "1.00x (baseline)"),
             ("forward: uniform output average", f_uni, f"{f_uni / f_one:.2f}x one expert"),
             ("forward: AFA", f_afa, f"{f_afa / f_uni:.2f}x the uniform average")]
    null = torch.full_like(tokens, NULL)

    def draw(fn):
        return lambda: sample(fn, (args.batch, 1, side, side), tokens, null, steps=args.sample_steps, guidance=2.0,
                              generator=torch.Generator().manual_seed(0))
    s_uni = timed(draw(uniform), max(2, args.repeats // 4))
    s_afa = timed(draw(model), max(2, args.repeats // 4))
    rows += [(f"DDIM {args.sample_steps} steps, CFG 2: uniform average", s_uni, "1.00x (baseline)"),
             (f"DDIM {args.sample_steps} steps, CFG 2: AFA", s_afa, f"{s_afa / s_uni:.2f}x the uniform average")]
    print(f"batch {args.batch}, {args.experts} experts at {side} x {side}, one thread, median of {args.repeats}")
    for name, sec, ratio in rows:
        print(f"{name:<45} {sec * 1000:9.1f} ms   {ratio}")


if __name__ == "__main__":
    main()
