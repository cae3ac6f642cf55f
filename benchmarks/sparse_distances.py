"""All-pairs l_p distances of sparse vectors: sparse_embed's support visit (geometry.pair_distances)
vs scipy's dense pdist, and the same check on the max-pooling embedding.

For n non-negative s-sparse vectors in R^d (data.random_sparse), times:

  - dense cdist (baseline): scipy.spatial.distance.pdist on X.toarray() for p = 1, 2, inf (the
    one-off toarray() is reported apart). Skipped when the dense copy would exceed --max-dense-gb;
  - support visit: geometry.pair_distances on the CSR matrix (all pairs, the same three p), the
    numbers checked equal to the baseline's;
  - the embedding: MaxPool.embed (m = 4s/eps, t = ln(n s)/eps) and pair_distances on it (grouped
    by repetition, as the study does).

Time is the best of --repeats runs after one warm-up, one BLAS thread.

Run: python benchmarks/sparse_distances.py [--n 300 --d 20000 --s 16 --eps 0.2 --repeats 3]
     python benchmarks/sparse_distances.py --d 1048576     # the small preset's d: no dense baseline
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from scipy.spatial.distance import pdist  # noqa: E402

from iclr_ray.studies.sparse_embed import data, embeddings, geometry  # noqa: E402

PS = (1.0, 2.0, math.inf)


def best_time(fn, repeats: int) -> tuple[float, object]:
    out = fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--d", type=int, default=20_000)
    ap.add_argument("--s", type=int, default=16)
    ap.add_argument("--eps", type=float, default=0.2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-dense-gb", type=float, default=2.0)
    a = ap.parse_args()
    X = data.random_sparse(a.n, a.d, a.s, seed=0)
    ia, ib = geometry.all_pairs(a.n)
    print(f"n = {a.n} vectors (pairs {ia.size}), d = {a.d}, s = {a.s}")

    t_sparse, got = best_time(lambda: geometry.pair_distances(X, ia, ib, PS), a.repeats)
    t_base = None
    if a.n * a.d * 8 / 2**30 <= a.max_dense_gb:
        t0 = time.perf_counter()
        A = X.toarray()
        t_dense_copy = time.perf_counter() - t0
        metric = {1.0: ("cityblock", {}), 2.0: ("euclidean", {}), math.inf: ("chebyshev", {})}
        t_base, base = best_time(lambda: {p: pdist(A, metric[p][0]) for p in PS}, a.repeats)
        for p in PS:
            mine = got[p][:, 0] ** (1 / p) if math.isfinite(p) else got[p][:, 0]
            assert np.allclose(mine, base[p], rtol=1e-10), f"p = {p}: distances differ"
        print(f"dense pdist (baseline):  {t_base:8.3f} s   (+ toarray {t_dense_copy:.3f} s)")
    else:
        print(f"dense pdist (baseline):  skipped, X.toarray() would take {a.n * a.d * 8 / 2**30:.1f} GiB")
    ratio = f"   {t_base / t_sparse:6.1f}x faster than the baseline" if t_base else ""
    print(f"support visit:           {t_sparse:8.3f} s{ratio}")

    m, t = embeddings.lp_dims(a.s, a.n, a.eps, 4.0, 1.0)
    f = embeddings.MaxPool(a.d, m, t, seed=1)
    t_embed, F = best_time(lambda: f.embed(X), a.repeats)
    t_emb_dist, _ = best_time(lambda: geometry.pair_distances(F, ia, ib, PS, group_size=m), a.repeats)
    print(f"max-pool embed (m = {m}, t = {t}, {m * t} dims): {t_embed:.3f} s; its all-pairs check: {t_emb_dist:.3f} s "
          f"({t_emb_dist / t_sparse:.1f}x the inputs' check: the image has {F.nnz // a.n} non-zeros per row vs {a.s})")


if __name__ == "__main__":
    main()
