"""alpharec's two hot paths against their plain alternatives, on one torch thread.

1. Full-ranking evaluation (Recall/NDCG/HR@20 of every user, training items masked): the study's
   vectorised ``alpharec.rank_metrics`` (one masked top-k over the score matrix) against a per-user
   loop (numpy argpartition per user, as a Cython-free port of the official evaluator would do).
   Both give the same numbers (checked).
2. The InfoNCE scores of a batch's sampled negatives: through the full user x catalogue score matrix
   then a gather (what ``sampled_scores`` does for a catalogue small beside the samples) against
   gathering the sampled rows and multiplying (its path for large catalogues), at MovieLens-100k's
   size and at an Amazon-Books-like one.

Prints the median seconds of ``--repeats`` runs each way and the ratios.

Run: python benchmarks/alpharec_ranking.py [--users 938 --items 1682 --repeats 5]
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from iclr_ray.studies.alpharec import alpharec as A  # noqa: E402


def per_user(scores: np.ndarray, targets: np.ndarray, exclude: np.ndarray, k: int):
    recall, ndcg, hr = [], [], []
    disc = 1.0 / np.log2(np.arange(k) + 2.0)
    for u in range(scores.shape[0]):
        t = np.flatnonzero(targets[u])
        if len(t) == 0:
            continue
        s = scores[u].copy()
        s[exclude[u]] = -np.inf
        top = np.argpartition(-s, k)[:k]
        top = top[np.argsort(-s[top], kind="stable")]
        hits = np.isin(top, t).astype(float)
        recall.append(hits.sum() / len(t))
        ndcg.append((hits * disc).sum() / disc[:min(len(t), k)].sum())
        hr.append(float(hits.any()))
    return np.array(recall), np.array(ndcg), np.array(hr)


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=938)
    ap.add_argument("--items", type=int, default=1682)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    scores = rng.standard_normal((args.users, args.items)).astype(np.float32)
    targets = rng.random((args.users, args.items)) < 0.006
    exclude = (rng.random((args.users, args.items)) < 0.03) & ~targets
    ts, tt, te = torch.tensor(scores), torch.tensor(targets), torch.tensor(exclude)

    vec = A.rank_metrics(ts, tt, te, 20)
    loop = per_user(scores, targets, exclude, 20)
    for a, b in zip((vec.recall, vec.ndcg, vec.hr), loop):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    t_vec = median_time(lambda: A.rank_metrics(ts, tt, te, 20), args.repeats)
    t_loop = median_time(lambda: per_user(scores, targets, exclude, 20), args.repeats)
    print(f"full ranking, {args.users} users x {args.items} items, K=20 (same metrics: checked)")
    print(f"  per-user loop    {t_loop * 1e3:9.1f} ms")
    print(f"  vectorised torch {t_vec * 1e3:9.1f} ms   {t_loop / t_vec:6.1f}x faster")

    g = torch.Generator().manual_seed(0)
    for n_items in (1682, 50_000):
        u, items = torch.randn(4096, 64, generator=g), torch.randn(n_items, 64, generator=g)
        idx = torch.randint(0, n_items, (4096, 257), generator=g)
        matmul = lambda: (u @ items.T).gather(1, idx)  # noqa: E731
        gather = lambda: torch.einsum("bd,bjd->bj", u, items[idx])  # noqa: E731
        torch.testing.assert_close(matmul(), gather(), atol=1e-4, rtol=1e-4)
        t_m, t_g = median_time(matmul, args.repeats), median_time(gather, args.repeats)
        chosen = "matmul" if n_items <= 64 * idx.shape[1] else "gather"
        print(f"InfoNCE scores, batch 4096 x 257 samples, {n_items} items (sampled_scores takes {chosen})")
        print(f"  score matrix + gather {t_m * 1e3:8.1f} ms;  gather rows + multiply {t_g * 1e3:8.1f} ms;  "
              f"ratio gather/matmul {t_g / t_m:5.2f}")


if __name__ == "__main__":
    main()
