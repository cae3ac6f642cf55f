"""What ClusPro's prototype memory costs, in training and at test time, against the CE baseline.

The study's small model (the CNN encoder on 16 x 16 digits, the three paths, d = 128) on one
thread, every method from the same weights. For each method: the median seconds of a training step
(forward, the memory's assignment and EMA update, backward, AdamW) on a batch of real rendered
digits, and of scoring the batch's every candidate pair at test time, over ``--repeats`` runs after
a warm-up; the ratios to CE. The test-time ratio should be 1 (the same inference path); the
training ratio is what the per-primitive OT costs (``--structure 0``: plain Sinkhorn).

Run: python benchmarks/cluspro_cost.py
     python benchmarks/cluspro_cost.py --structure 0 --batch 256
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from iclr_ray.studies.cluspro import cluspro as C  # noqa: E402
from iclr_ray.studies.cluspro import data as D  # noqa: E402
from _timing import timed  # noqa: E402  (benchmarks/_timing.py)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--structure", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=200)
    a = ap.parse_args()
    torch.set_num_threads(1)
    data = D.build("digits", True, images=400, seed=0)
    tr = data.index("train")
    pid = {(int(x), int(y)): i for i, (x, y) in enumerate(data.seen)}
    pick = np.random.default_rng(0).choice(tr, a.batch)
    x = torch.as_tensor(data.x[pick])
    attrs, objs = torch.as_tensor(data.attr[pick]), torch.as_tensor(data.obj[pick])
    pairs = torch.as_tensor([pid[(int(u), int(v))] for u, v in zip(attrs, objs)])
    cands = torch.as_tensor(data.pairs("test"))
    rows = []
    for method in ("ce", "single", "kmeans", "cluspro"):
        torch.manual_seed(0)
        m = C.CZSL(len(data.attrs), len(data.objs), data.seen, method=method, k=a.k, structure=a.structure)
        opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3)

        def step():
            m.train()
            opt.zero_grad()
            m.loss(x, attrs, objs, pairs).backward()
            opt.step()

        def infer():
            m.eval()
            m.pair_scores(x, cands)

        rows.append((method, timed(step, a.repeats), timed(infer, a.repeats)))
    base_train, base_infer = rows[0][1], rows[0][2]
    print(f"batch {a.batch}, K {a.k}, structure {a.structure}, one thread; median of {a.repeats}")
    print(f"{'method':10s} {'train step ms':>14s} {'x CE':>6s} {'inference ms':>13s} {'x CE':>6s}")
    for method, t, i in rows:
        print(f"{method:10s} {t * 1e3:14.2f} {t / base_train:6.2f} {i * 1e3:13.2f} {i / base_infer:6.2f}")


if __name__ == "__main__":
    main()
