"""Sketch construction time and accuracy of coordinated sampling vs JL, at equal storage.

Measures, for one party's matrix A of a sparse heavy-tailed pair (data.sparse_pair), how long it
takes to build each sketch and how accurately the two parties' sketches estimate AᵀB:

  - dense JL (baseline): a plain Gaussian S (k x n, np.random) times A.toarray(), the textbook
    sketch that ignores sparsity. Its time excludes the one-off A.toarray() (reported separately);
  - JL: the study's sparse-aware JL (sketches.sketch("jl"), O(nnz k));
  - CountSketch, and priority / threshold sampling.

Equal storage: the linear sketches keep k = rows rows (rows x d numbers); the sampling sketches get
the same budget, k = sketches.size_for("priority", A, rows). Time is the best of --repeats runs after
one warm-up (time.perf_counter, one BLAS thread). Error is sketches.relative_error of the estimate
vs the exact product, mean over --repeats shared seeds (dense JL's estimate applies the same S as
a sparse product, so B need not be densified too). If A.toarray() would exceed --max-dense-gb the
dense baseline is skipped and ratios are taken against the sparse-aware JL instead.

Run: python benchmarks/sketch_construction.py [--n 100000 --d 1000 --nnz 10 --rows 16
     --repeats 5 --seed 0 --max-dense-gb 2]
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from iclr_ray.studies.coord_sketch import data, sketches  # noqa: E402


def best_time(fn, repeats: int) -> float:
    """Best wall time of ``repeats`` calls of fn(), after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def dense_gaussian(n: int, k: int, seed: int) -> np.ndarray:
    """S (k x n) with N(0, 1/k) entries; column j belongs to key j, shared by both parties."""
    return np.random.default_rng(seed).standard_normal((k, n)) / np.sqrt(k)


def dense_jl_error(pair: data.Pair, n: int, k: int, seed: int, exact, fro) -> float:
    """Dense JL's error: W = (S_A A)ᵀ(S_B B) with the same S (computed as sparse products)."""
    S = dense_gaussian(n, k, seed)
    SA = (pair.A.T @ S[:, pair.keys_a].T).T
    SB = (pair.B.T @ S[:, pair.keys_b].T).T
    return sketches.relative_error(SA.T @ SB, exact, *fro)


def method_error(pair: data.Pair, method: str, k: int, seed: int, exact, fro) -> tuple[float, int]:
    """(relative error of AᵀB, stored numbers of A's sketch) for one shared seed."""
    sa = sketches.sketch(method, pair.A, pair.keys_a, k, seed)
    sb = sketches.sketch(method, pair.B, pair.keys_b, k, seed)
    return sketches.relative_error(sketches.estimate(sa, sb), exact, *fro), sa.storage


def measure(args) -> tuple[list[dict], str]:
    pair = data.sparse_pair(args.n, args.d, args.d, args.nnz, 0.3, 1.5, args.seed)
    A, keys = pair.A, pair.keys_a
    exact, fro = pair.exact(), pair.fro()
    seeds = [args.seed + i for i in range(args.repeats)]
    k_lin, k_samp = args.rows, sketches.size_for("priority", A, args.rows)
    print(f"A: {A.shape[0]} x {A.shape[1]}, nnz {A.nnz}; budget {args.rows * args.d} numbers "
          f"(JL rows {k_lin}, sampling k {k_samp}); best of {args.repeats} after a warm-up")
    rows = []
    dense_gb = A.shape[0] * A.shape[1] * 8 / 2**30
    if dense_gb <= args.max_dense_gb:
        t0 = time.perf_counter()
        A_dense = A.toarray()
        print(f"A.toarray(): {dense_gb:.2f} GiB in {time.perf_counter() - t0:.3f} s (not counted)")
        secs = best_time(lambda: dense_gaussian(args.n, k_lin, args.seed)[:, keys] @ A_dense, args.repeats)
        del A_dense
        errs = [dense_jl_error(pair, args.n, k_lin, s, exact, fro) for s in seeds]
        rows.append(dict(method="dense JL", k=k_lin, stored=k_lin * args.d, secs=secs, err=np.mean(errs)))
        baseline = "dense JL"
    else:
        print(f"skipping dense JL: A.toarray() needs {dense_gb:.2f} GiB > --max-dense-gb "
              f"{args.max_dense_gb}; ratios are vs the sparse-aware JL")
        baseline = "JL (sparse-aware)"
    for method in ("jl", "countsketch", "priority", "threshold"):
        k = k_lin if method in ("jl", "countsketch") else k_samp
        secs = best_time(lambda: sketches.sketch(method, A, keys, k, args.seed), args.repeats)
        errs, stored = zip(*(method_error(pair, method, k, s, exact, fro) for s in seeds))
        rows.append(dict(method=method, k=k, stored=int(np.mean(stored)), secs=secs, err=np.mean(errs)))
    base = rows[0]
    for r in rows:
        r["speed"], r["err_ratio"] = base["secs"] / r["secs"], base["err"] / r["err"]
    return rows, baseline


def report(rows: list[dict], baseline: str) -> None:
    print(f"{'method':<12} {'k':>6} {'stored':>8} {'build s':>10} {'speed vs ' + baseline:>27} "
          f"{'rel. error':>11} {'err ratio':>10}")
    for r in rows:
        print(f"{r['method']:<12} {r['k']:>6} {r['stored']:>8} {r['secs']:>10.5f} {r['speed']:>26.1f}x "
              f"{r['err']:>11.4f} {r['err_ratio']:>9.1f}x")
    p = next(r for r in rows if r["method"] == "priority")
    print(f"priority sampling: {p['speed']:.1f}x faster than {baseline}, "
          f"{p['err_ratio']:.1f}x lower error at equal storage")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="key universe size")
    ap.add_argument("--d", type=int, default=1000, help="columns of A and B")
    ap.add_argument("--nnz", type=int, default=10, help="non-zeros per row")
    ap.add_argument("--rows", type=int, default=16, help="JL rows; sets the shared storage budget")
    ap.add_argument("--repeats", type=int, default=5, help="timing repeats and error seeds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-dense-gb", type=float, default=2.0, help="skip densifying A above this")
    args = ap.parse_args()
    report(*measure(args))


if __name__ == "__main__":
    main()
