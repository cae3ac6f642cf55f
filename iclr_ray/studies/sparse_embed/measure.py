"""What the sparse_embed experiments measure, as plain functions of arrays (no Ray, no I/O): the
distortion of an embedding over all pairs, the repetitions exact l_inf needs, the birthday-paradox
map's exactness and compressed-sensing recovery."""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from . import data, embeddings

RATIO_TOL = 1e-9
"""relative slack for float round-off when checking "never above the true distance" and exactness
of norms (exact l_inf distances are compared bit for bit)"""


def plabel(p: float) -> str:
    """p as it appears in metrics: "1", "2", "inf" (JSON has no infinity)."""
    return "inf" if math.isinf(p) else f"{p:g}"


def ratios(estimate: np.ndarray, true: np.ndarray) -> np.ndarray:
    """estimate / true over the pairs at positive true distance (duplicates carry no ratio)."""
    keep = true > 0
    return estimate[keep] / true[keep]


def distortion(r: np.ndarray) -> dict[str, float]:
    """Worst-case summary of distance ratios: min, max, mean and max |1 - ratio|."""
    if not r.size:
        return {"min_ratio": float("nan"), "max_ratio": float("nan"), "mean_ratio": float("nan"),
                "distortion": float("nan")}
    return {"min_ratio": float(r.min()), "max_ratio": float(r.max()), "mean_ratio": float(r.mean()),
            "distortion": float(np.abs(1.0 - r).max())}


def exact_fraction(estimate: np.ndarray, true: np.ndarray) -> float:
    """Share of pairs whose distance is reproduced bit for bit."""
    return float(np.mean(estimate == true)) if true.size else float("nan")


def exact_by_reps(per_rep_max: np.ndarray, true: np.ndarray) -> np.ndarray:
    """For t = 1..T: share of pairs whose l_inf distance is exact using the first t repetitions
    (per_rep_max[k, j] = ||f_j(x) - f_j(y)||_inf for pair k)."""
    return (np.maximum.accumulate(per_rep_max, axis=1) == true[:, None]).mean(axis=0)


def smallest_exact_t(frac_by_t: np.ndarray) -> int | None:
    """The smallest t at which every pair is exact (None if no t drawn is)."""
    hit = np.flatnonzero(frac_by_t == 1.0)
    return int(hit[0]) + 1 if hit.size else None


def birthday(X: sp.csr_matrix, m_values: list[int], seed: int) -> list[dict[str, float]]:
    """The linear map x -> (sum_{i: h(i)=b} sigma(i) x_i)_b into m buckets: for each m, the share of
    vectors whose l_1, l_2 and l_inf norms are all preserved (to RATIO_TOL), beside the chance that
    their supports hash without collision, prod_{i<s} (1 - i/m)."""
    s = data.sparsity(X)
    absx = abs(X)
    norms = {"1": np.asarray(absx.sum(axis=1)).ravel(), "2": np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel()),
             "inf": np.asarray(absx.max(axis=1).todense()).ravel()}
    out = []
    for m in m_values:
        g = embeddings.CountSketch(X.shape[1], m, 1, seed).embed(X)
        absg = abs(g)
        got = {"1": np.asarray(absg.sum(axis=1)).ravel(), "2": np.sqrt(np.asarray(g.multiply(g).sum(axis=1)).ravel()),
               "inf": np.asarray(absg.max(axis=1).todense()).ravel()}
        ok = np.all([np.abs(got[p] - norms[p]) <= RATIO_TOL * norms[p] for p in norms], axis=0)
        out.append({"m": int(m), "measured": float(ok.mean()), "predicted": embeddings.birthday_exact(s, m)})
    return out


def cs_recovery(s: int, d: int, m_min: int, m_max: int, vectors: int, tolerance: float, seed: int) -> list[dict]:
    """Share of non-negative s-sparse vectors that NNLS recovers from m Gaussian measurements,
    for m = m_min, m_min sqrt(2), ... until 99% are recovered or m passes m_max."""
    X = data.random_sparse(vectors, d, s, seed).toarray()
    out, m = [], float(m_min)
    while True:
        mi = min(int(round(m)), m_max)
        A = embeddings.gaussian_measurements(mi, d, seed + 1)
        ok = [np.abs(embeddings.nnls_decode(A, A @ x) - x).max() <= tolerance * np.abs(x).max() for x in X]
        out.append({"m": mi, "recovered": float(np.mean(ok))})
        if out[-1]["recovered"] >= 0.99 or mi >= m_max:
            return out
        m *= math.sqrt(2)


def m_at(rows: list[dict], field: str, level: float = 0.99) -> float:
    """The m at which ``field`` first reaches ``level``, interpolated in log m between grid points
    (nan if it never does)."""
    pts = sorted((r["m"], r[field]) for r in rows)
    for (m0, f0), (m1, f1) in zip(pts, pts[1:]):
        if f0 < level <= f1:
            w = (level - f0) / (f1 - f0)
            return float(math.exp(math.log(m0) + w * (math.log(m1) - math.log(m0))))
    if pts and pts[0][1] >= level:
        return float(pts[0][0])
    return float("nan")


def loglog_slope(x: list[float], y: list[float]) -> float:
    """Least-squares slope of log y on log x over the finite positive points."""
    pts = [(a, b) for a, b in zip(x, y) if a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b)]
    if len(pts) < 2:
        return float("nan")
    lx, ly = np.log(np.array(pts)).T
    return float(np.polyfit(lx, ly, 1)[0])
