"""What Dreamweaver's parts cost on CPU, against baselines in the same run.

The study's small model (32 x 32 clips, 3 slots x 8 blocks x 64, a 2-layer decoder over 64 dVAE
tokens) on one thread, from the same weights. Median seconds over ``--repeats`` runs after a
warm-up, with the ratios:
- a training step (forward, backward, Adam) with the block prototype memory vs without it (the
  ``small`` default);
- the predictive vs the reconstruction objective (the same model: should be about 1);
- drawing a frame greedily token by token (the imagination test's path) vs one teacher-forced pass
  over the same tokens (training's path).

Run: python benchmarks/dreamweaver_cost.py
     python benchmarks/dreamweaver_cost.py --batch 48 --repeats 30
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from iclr_ray.studies.dreamweaver import data as D  # noqa: E402
from iclr_ray.studies.dreamweaver import dreamweaver as W  # noqa: E402
from _timing import timed  # noqa: E402  (benchmarks/_timing.py)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    videos = D.generate(args.batch, side=32, frames=4, seed=0)
    clip = W.to_input(videos.frames)
    k = torch.zeros(args.batch, dtype=torch.long)

    def step_fn(model):
        opt = torch.optim.Adam(model.parameters(), 1e-4)

        def step():
            loss = model(clip, 0.5, k).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return step

    models = {}
    for name, kw in (("predict, no memory (small)", {}), ("predict, with memory", {"memory": True}),
                     ("reconstruct, no memory", {"objective": "reconstruct"})):
        torch.manual_seed(0)
        models[name] = W.Dreamweaver(**{"objective": "predict", "memory": False, **kw})
    times = {name: timed(step_fn(m), args.repeats) for name, m in models.items()}
    base = times["predict, no memory (small)"]
    print(f"training step, batch {args.batch} clips of 4 frames at 32 x 32, one thread (median of {args.repeats}):")
    for name, t in times.items():
        print(f"  {name:28s} {t * 1e3:8.1f} ms   {t / base:5.2f}x")

    m = models["predict, no memory (small)"].eval()
    with torch.no_grad():
        slots = m.bind(clip[:, :2])[0][:, -1]
        memory = m.decoder.memory(slots)
        tokens = m.decoder.generate(memory, k)
    forced = timed(lambda: m.decoder.logits(memory, k, tokens), args.repeats)
    greedy = timed(lambda: m.decoder.generate(memory, k), max(3, args.repeats // 4))
    print(f"drawing {args.batch} frames of {tokens.shape[1]} tokens: greedy {greedy * 1e3:.1f} ms, one teacher-forced "
          f"pass {forced * 1e3:.1f} ms: {greedy / forced:.1f}x")
    print(f"(tokens drawn: {len(np.unique(tokens.numpy()))} distinct codes)")


if __name__ == "__main__":
    main()
