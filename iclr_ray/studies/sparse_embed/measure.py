"""What the sparse_embed experiments measure, as plain functions of arrays (no Ray, no I/O): the
distortion of an embedding over all pairs, the repetitions exact l_inf needs, the downstream tasks
on embedded distances, the birthday-paradox map's exactness and compressed-sensing recovery."""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from . import data, embeddings, geometry

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


def lp_row(method: str, eps: float, seed: int, m: int, t: int, p: float, estimate: np.ndarray,
           true: np.ndarray) -> dict:
    """One (map, eps, seed, p) of the l_p sweep: the worst distortion over all pairs and the share
    of pairs reproduced exactly."""
    return {"method": method, "eps": eps, "seed": seed, "m": m, "t": t, "dims": m * t, "p": plabel(p),
            **distortion(ratios(estimate, true)), "exact_fraction": exact_fraction(estimate, true)}


def exact_fraction(estimate: np.ndarray, true: np.ndarray) -> float:
    """Share of pairs whose distance is reproduced bit for bit."""
    return float(np.mean(estimate == true)) if true.size else float("nan")


def exact_by_reps(final_max: np.ndarray, first_max: np.ndarray, true: np.ndarray, T: int) -> np.ndarray:
    """For t = 1..T: share of pairs whose l_inf distance is exact using the first t repetitions.
    ``final_max`` is the estimate from all T repetitions and ``first_max`` the first repetition
    that attains it (the running maximum is final from there on). The max-pooling estimate never
    exceeds the true distance, so a pair is exact at t exactly when its final estimate is the true
    distance and that repetition is among the first t."""
    hit = final_max == true
    return np.array([float(np.mean(hit & (first_max < t))) if true.size else math.nan for t in range(1, T + 1)])


def smallest_exact_t(frac_by_t: np.ndarray) -> int | None:
    """The smallest t at which every pair is exact (None if no t drawn is)."""
    hit = np.flatnonzero(frac_by_t == 1.0)
    return int(hit[0]) + 1 if hit.size else None


def linf_row(size: int, seed: int, m: int, t_pred: int, final_max: np.ndarray, first_max: np.ndarray,
             reps: int, true: np.ndarray, linear: np.ndarray) -> dict:
    """One (|X|, seed) of the exact-l_inf sweep: the share of pairs exact at t = 1..reps, whether
    every pair is exact at the predicted t, the smallest t at which every pair is, and the linear
    map's exact share and worst ratio at the predicted size."""
    frac = exact_by_reps(final_max, first_max, true, reps)
    return {"size": size, "seed": seed, "pairs": int(true.size), "m": m, "t_pred": t_pred,
            "exact_by_t": frac.tolist(), "exact_at_pred": bool(frac[t_pred - 1] == 1.0),
            "t_min": smallest_exact_t(frac), "linear_exact_fraction": exact_fraction(linear, true),
            "linear_max_ratio": float(ratios(linear, true).max())}


def downstream(true: dict, estimates: dict, n: int, k: int) -> dict[str, list[dict]]:
    """Diameter and k-center (Gonzalez) computed on embedded distances, judged in the original
    metric, for every map ``(method, eps, seed)`` and p in ``estimates``: relative diameter error,
    and the k-center cost of the embedded run's centers over the cost of the centers the same
    algorithm picks on the true distances."""
    diam, kc = [], []
    for (method, eps, seed), est_by_p in estimates.items():
        for p, est in est_by_p.items():
            label = {"map": method, "eps": eps, "seed": seed, "p": plabel(p)}
            true_diam, _ = geometry.diameter(true[p])
            est_diam, _ = geometry.diameter(est)
            diam.append({**label, "true": true_diam, "embedded": est_diam,
                         "rel_error": abs(est_diam - true_diam) / true_diam if true_diam > 0 else float("nan")})
            D, De = geometry.square(true[p], n), geometry.square(est, n)
            c_true, c_emb = geometry.k_center(D, k), geometry.k_center(De, k)
            cost_true = geometry.k_center_cost(D, c_true)
            kc.append({**label, "k": k,
                       "cost_ratio": geometry.k_center_cost(D, c_emb) / cost_true if cost_true > 0 else float("nan"),
                       "same_centers": bool(np.array_equal(c_true, c_emb))})
    return {"diameter": diam, "k_center": kc}


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
    """Which of ``vectors`` non-negative s-sparse vectors NNLS recovers from m Gaussian
    measurements, for m = m_min, m_min sqrt(2), ... until 99% are recovered or m passes m_max: per m,
    the share and each vector's outcome (vector k is the same vector at every m)."""
    X = data.random_sparse(vectors, d, s, seed).toarray()
    out, m = [], float(m_min)
    while True:
        mi = min(int(round(m)), m_max)
        A = embeddings.gaussian_measurements(mi, d, seed + 1)
        ok = [bool(np.abs(embeddings.nnls_decode(A, A @ x) - x).max() <= tolerance * np.abs(x).max()) for x in X]
        out.append({"m": mi, "recovered": float(np.mean(ok)), "ok": ok})
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
    """Least-squares slope of log y on log x. Every point must be measured (finite and positive):
    a point that is not, such as an m_99 the sweep never reached, makes the slope nan rather than
    being dropped, since a slope through the remaining points would describe a different curve."""
    pts = np.array([(a, b) for a, b in zip(x, y)], float).reshape(-1, 2)
    if len(pts) < 2 or not (np.isfinite(pts).all() and (pts > 0).all()):
        return float("nan")
    lx, ly = np.log(pts).T
    return float(np.polyfit(lx, ly, 1)[0])


def unmeasured(values) -> int:
    """How many of ``values`` are not finite and positive (the points loglog_slope refuses)."""
    return sum(1 for v in values if v is None or not math.isfinite(v) or v <= 0)
