"""What Ctrl-U's post-training step costs on CPU, against its baselines in the same run.

The study's small generator (a 32 x 32 conditional U-Net (16, 32, 32) with its ControlNet, U-Net
frozen) and its reward segmenter, one thread, the same weights and batch for every arm. Median
seconds over ``--repeats`` steps after a warm-up, with the ratio to the ControlNet arm:
- ControlNet (L_pre alone), ControlNet++ (plus the reward through the one-step x̂0) and Ctrl-U
  (the batch duplicated at t and t + Δt, both read by the reward model): the reviewers' question of
  what the second pass costs;
- all timesteps in the reward window vs the study's uniform t (40% of samples in [0, 400]);
- DDIM sampling with classifier-free guidance (two branches) vs without.

Run: python benchmarks/ctrl_u_cost.py
     python benchmarks/ctrl_u_cost.py --batch 32 --repeats 20
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402

import torch  # noqa: E402

from iclr_ray.diffusion.model import NULL, freeze  # noqa: E402
from iclr_ray.diffusion.sampling import ddpm, sample  # noqa: E402
from iclr_ray.studies.ctrl_u import data as D  # noqa: E402
from iclr_ray.studies.ctrl_u.config import Config  # noqa: E402
from iclr_ray.studies.ctrl_u.ctrl_u import post_train_loss  # noqa: E402
from iclr_ray.studies.ctrl_u.run import build_denoiser, build_segmenter, recipe_dict  # noqa: E402
from _timing import timed  # noqa: E402  (benchmarks/_timing.py)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    c = recipe_dict(Config())
    den = build_denoiser(c, 0)
    freeze(den.unet)
    freeze(den.tokens)
    reward = freeze(build_segmenter(c, "reward").eval())
    opt = torch.optim.AdamW([p for p in den.parameters() if p.requires_grad], 1e-4)
    sched = ddpm()
    scenes = D.generate(args.batch, seed=0)
    x0, cond, target = D.to_model(scenes.images), D.one_hot(scenes.masks), torch.as_tensor(scenes.masks).long()
    ctx = den.context(D.captions(scenes.masks))
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(x0.shape, generator=g)
    uniform, windowed = torch.randint(0, 1000, (args.batch,), generator=g), torch.randint(0, 401, (args.batch,),
                                                                                          generator=g)

    def step(arm, t):
        def run():
            out = post_train_loss(den, reward, sched, x0, ctx, cond, target, t, noise, arm=arm, lam=0.5, dt=1,
                                  u_scale=1.0, t_min=0, t_max=400)
            opt.zero_grad()
            out["loss"].backward()
            opt.step()
        return run

    times = {}
    for arm in ("controlnet", "reward", "ctrl_u"):
        times[f"{arm}, t uniform"] = timed(step(arm, uniform), args.repeats)
        if arm != "controlnet":
            times[f"{arm}, t all in [0, 400]"] = timed(step(arm, windowed), args.repeats)
    base = times["controlnet, t uniform"]
    print(f"post-training step, batch {args.batch} at 32 x 32, ControlNet trained, one thread "
          f"(median of {args.repeats}):")
    for name, t in times.items():
        print(f"  {name:28s} {t * 1e3:8.1f} ms   {t / base:5.2f}x")

    null = den.context(torch.full_like(D.captions(scenes.masks), NULL))
    den.eval()
    draws = {w: timed(lambda w=w: sample(den, tuple(x0.shape), ctx, null, steps=20, guidance=w,
                                         generator=torch.Generator().manual_seed(1), cond=cond),
                      max(3, args.repeats // 3)) for w in (1.0, 2.0)}
    print(f"DDIM 20 steps, {args.batch} images: without guidance {draws[1.0]:.2f} s, CFG 2 {draws[2.0]:.2f} s "
          f"({draws[2.0] / draws[1.0]:.2f}x)")


if __name__ == "__main__":
    main()
