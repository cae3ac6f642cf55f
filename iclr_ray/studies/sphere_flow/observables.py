"""What is measured on a particle configuration or a trajectory (no Ray, no I/O).

Mode amplitudes. For degree ℓ, a_ℓ² = (1/n²) Σ_{i,j} P̃_ℓ(⟨x_i,x_j⟩) with P̃_ℓ the Gegenbauer
polynomial C_ℓ^{(d−2)/2} normalised to P̃_ℓ(1) = 1 (Chebyshev T_ℓ on the circle, Legendre P_ℓ on
S²). By the addition theorem it is the mean squared coefficient of the empirical measure over the
dim(H_ℓ) harmonics of degree ℓ (up to a fixed factor), so: on the circle a_k = |(1/n) Σ_j e^{ikθ_j}|;
for n i.i.d. uniform points E a_ℓ² = 1/n for every ℓ (no degree starts ahead); in the linear
phase every harmonic of degree ℓ grows like e^{λ_ℓ t}, and so does a_ℓ.

Clusters on the circle. Sorted angles are split at gaps wider than ``gap``; groups holding fewer
than ``min_mass`` of the particles are stragglers and ignored; the configuration counts as
clustered when every remaining group spans at most ``extent`` radians. The count is 0 while the
configuration is not clustered (the linear phase, or clusters still forming or merging).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import special

from .dynamics import circle_moments, to_angles


def mode_amplitudes(X: np.ndarray, L: int) -> np.ndarray:
    """a_ℓ for ℓ = 1..L (see the module docstring)."""
    n, d = X.shape
    if d == 2:
        return np.abs(circle_moments(X, L)[1:])
    if d == 3:  # addition theorem: a_ℓ² = 4π/(2ℓ+1) Σ_m |mean_j Y_ℓm(x_j)|², O(nL²) instead of O(n²L)
        theta, phi = np.arccos(np.clip(X[:, 2], -1.0, 1.0)), np.arctan2(X[:, 1], X[:, 0])
        coef = special.sph_harm_y_all(L, L, theta, phi).mean(axis=-1)
        power = (np.abs(coef) ** 2).sum(axis=1) * 4 * math.pi / (2 * np.arange(L + 1) + 1)
        return np.sqrt(power[1:])
    G = np.clip(X @ X.T, -1.0, 1.0)
    a = (d - 2) / 2
    out = np.empty(L)
    # C_{l+1} = (2(l+a) s C_l − (l+2a−1) C_{l−1}) / (l+1), normalised by C_l(1) as it goes
    prev, cur = np.ones_like(G), G.copy()  # P̃_0, P̃_1 (C_1^a(s) = 2a s, normalised: s)
    c_prev, c_cur = 1.0, 2 * a  # C_0^a(1), C_1^a(1)
    out[0] = cur.sum() / n**2
    for ell in range(1, L):
        c_next = special.eval_gegenbauer(ell + 1, a, 1.0)
        nxt = (2 * (ell + a) * c_cur * G * cur - (ell + 2 * a - 1) * c_prev * prev) / ((ell + 1) * c_next)
        prev, cur, c_prev, c_cur = cur, nxt, c_cur, c_next
        out[ell] = cur.sum() / n**2
    return np.sqrt(np.maximum(out, 0.0))


def linear_phase(t: np.ndarray, amps: np.ndarray, threshold: float) -> dict:
    """The linear phase read from amplitudes a_ℓ(t) (rows: times, columns: ℓ = 1..L): it ends
    when the largest amplitude first reaches ``threshold``; the mode holding it is the dominant
    mode; each mode's growth rate is the least-squares slope of log a_ℓ over [0, that time]."""
    t, amps = np.asarray(t, float), np.asarray(amps, float)
    hit = np.flatnonzero(amps.max(axis=1) >= threshold)
    if hit.size == 0:
        return {"reached": False, "t_end": math.nan, "dominant": None, "slopes": [math.nan] * amps.shape[1]}
    i = int(hit[0])
    window = slice(0, i + 1)
    slopes = (np.polyfit(t[window], np.log(np.maximum(amps[window], 1e-300)), 1)[0]
              if i >= 2 else np.full(amps.shape[1], math.nan))
    return {"reached": True, "t_end": float(t[i]), "dominant": int(np.argmax(amps[i]) + 1),
            "slopes": [float(s) for s in slopes]}


def circle_clusters(X: np.ndarray, gap: float, extent: float, min_mass: float) -> tuple[int, list[float]]:
    """(cluster count, their masses): 0 and [] while not clustered (module docstring)."""
    theta = np.sort(np.mod(to_angles(X), 2 * math.pi))
    n = len(theta)
    gaps = np.diff(np.concatenate([theta, [theta[0] + 2 * math.pi]]))
    cuts = np.flatnonzero(gaps > gap)  # a group ends at each cut
    if cuts.size == 0:
        return 0, []
    starts = (cuts + 1) % n
    ends = np.roll(cuts, -1)
    sizes = (ends - starts) % n + 1
    spans = np.mod(theta[ends] - theta[starts], 2 * math.pi)
    keep = sizes >= min_mass * n
    if not keep.any() or np.any(spans[keep] > extent):
        return 0, []
    masses = sorted((sizes[keep] / n).tolist(), reverse=True)
    return int(keep.sum()), masses


def plateau(t: np.ndarray, counts: np.ndarray) -> dict:
    """Formation: the first time the configuration is clustered (count > 0). Plateau: how long
    the count stays at its value at formation, ended by the first observation with another
    positive count (a merge when it is lower); unclustered observations in between (a straggler
    group passing, a cluster forming) end nothing. Censored at the last observation if nothing
    changed. Also the longest run of any one positive count, for the table."""
    t, counts = np.asarray(t, float), np.asarray(counts, int)
    on = np.flatnonzero(counts > 0)
    out = {"formed": bool(on.size), "t_form": math.nan, "count": 0, "t_change": math.nan, "plateau": math.nan,
           "merged": False, "censored": True, "final_count": 0, "longest": math.nan, "longest_count": 0,
           "longest_censored": True}
    if on.size == 0:
        return out
    tp, cp = t[on], counts[on]
    change = np.flatnonzero(cp[1:] != cp[:-1]) + 1  # where the positive count changes
    bounds = np.concatenate([[0], change, [len(cp)]])
    runs = [(tp[bounds[i + 1]] if bounds[i + 1] < len(cp) else t[-1]) - tp[bounds[i]] for i in range(len(bounds) - 1)]
    lengths = [r if cp[bounds[i]] > 1 else -1.0 for i, r in enumerate(runs)]  # one cluster is the end, no plateau
    best = int(np.argmax(lengths))
    out.update({"t_form": float(tp[0]), "count": int(cp[0]), "plateau": float(runs[0]),
                "censored": change.size == 0, "final_count": int(cp[-1]), "longest": float(runs[best]),
                "longest_count": int(cp[bounds[best]]), "longest_censored": best == len(runs) - 1})
    if change.size:
        out.update({"t_change": float(tp[change[0]]), "merged": bool(cp[change[0]] < cp[0])})
    if cp[0] == 1:  # straight to a single cluster, the end state: no meta-stable configuration at all
        out.update({"plateau": 0.0, "censored": False, "longest": 0.0, "longest_censored": False})
    return out


def time_below(t: np.ndarray, counts: np.ndarray, k: int) -> tuple[float, bool]:
    """The first time the configuration is clustered into fewer than ``k`` clusters (0 < count < k:
    the k-cluster state is gone), and whether that never happened (censored at the last time)."""
    t, counts = np.asarray(t, float), np.asarray(counts, int)
    below = np.flatnonzero((counts > 0) & (counts < k))
    return (float(t[below[0]]), False) if below.size else (float(t[-1]), True)
