"""Self-attention particles on the sphere (Geshkovski et al.; Bruno, Pasqualotto, Agazzi 2025).

n tokens x_i ∈ S^{d-1}, Q = K = V = I, evolving in continuous depth t:

    USA (unnormalised):      ẋ_i = P⊥_{x_i}( (1/n) Σ_j e^{β⟨x_i,x_j⟩} x_j )
    SA (softmax-normalised): ẋ_i = P⊥_{x_i}( Σ_j e^{β⟨x_i,x_j⟩} x_j / Σ_j e^{β⟨x_i,x_j⟩} )

with P⊥_x = I − x xᵀ. On the circle, x = (cos θ, sin θ), USA is the authors' angle equation
θ̇_i = −(1/n) Σ_j e^{β cos(θ_i−θ_j)} sin(θ_i−θ_j) (:func:`angle_velocity`, tested equal).

Both forms increase E(x) = (1/(2βn²)) Σ_{i,j} e^{β⟨x_i,x_j⟩}: USA is its spherical gradient
ascent (per-particle gradient times n), SA the same gradient divided by each particle's
normaliser Z_i > 0, so dE/dt = (1/n) Σ_i |ẋ_i|² Z_i^{(SA)} >= 0 in both. :func:`interaction`
returns the positive multiple 2β e^{-β} E = (1/n²) Σ e^{β(⟨x_i,x_j⟩−1)} ∈ (0, 1] (1: one cluster).

Time is measured in a unit chosen by the caller: the velocity is divided by ``rate`` (the study
passes λ_{k*} of the form, so one time unit is one e-folding of the most unstable mode and USA's
e^β stiffness is scaled out). Integrators work on the embedded coordinates and retract to the
sphere after every step; the defect they retract (max_i ||x_i| − 1| before it) is recorded.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import special

FORMS = ("usa", "sa")
BLOCK = 2048
"""rows of the n x n interaction computed at once (bounds memory at n = 2e4: 2048 x n doubles)"""


def uniform_sphere(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """n i.i.d. uniform points on S^{d-1} (normalised Gaussians)."""
    X = rng.standard_normal((n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def to_angles(X: np.ndarray) -> np.ndarray:
    return np.arctan2(X[:, 1], X[:, 0])


def from_angles(theta: np.ndarray) -> np.ndarray:
    return np.stack([np.cos(theta), np.sin(theta)], axis=1)


def project(X: np.ndarray, M: np.ndarray) -> np.ndarray:
    """Row-wise P⊥_{x_i} m_i = m_i − ⟨x_i, m_i⟩ x_i."""
    return M - np.einsum("ij,ij->i", X, M)[:, None] * X


def velocity(X: np.ndarray, beta: float, form: str, rate: float = 1.0) -> np.ndarray:
    """The attention velocity of every particle, divided by ``rate`` (the time unit)."""
    if form not in FORMS:
        raise ValueError(f"unknown form {form!r}; known: {', '.join(FORMS)}")
    n = X.shape[0]
    M = np.empty_like(X)
    # USA weights e^{βG}/n are computed as e^{βG − log(n·rate)}, SA's as e^{β(G−1)} (max 1)
    shift = math.log(n * rate) if form == "usa" else beta
    for lo in range(0, n, BLOCK):
        W = X[lo:lo + BLOCK] @ X.T
        W *= beta
        W -= shift
        np.exp(W, out=W)
        M[lo:lo + BLOCK] = W @ X
        if form == "sa":
            M[lo:lo + BLOCK] /= W.sum(axis=1, keepdims=True) * rate
    return project(X, M)


@functools.lru_cache(maxsize=256)
def fourier_cutoff(beta: float, tol: float = 1e-16) -> int:
    """K with k I_k(β)/I_0(β) < tol for every k > K: I_k falls faster than geometrically once
    k > β, so truncating e^{β cos ψ} = Σ_k I_k(β) e^{ikψ} at K changes velocities by < ~tol."""
    k = np.arange(1, int(4 * beta + 60))
    small = np.flatnonzero(k * special.ive(k, beta) / special.ive(0, beta) < tol)
    return int(k[small[0]]) if small.size else int(k[-1])


def harmonics(X: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray]:
    """cos(kθ_i), sin(kθ_i) for k = 1..K as two K x n arrays (angle-addition recurrence on the
    embedded coordinates; real arrays, since numpy's complex matrix-vector products are slow)."""
    c, s = X[:, 0], X[:, 1]
    C, S = np.empty((K, len(c))), np.empty((K, len(c)))
    C[0], S[0] = c, s
    for k in range(1, K):
        C[k] = C[k - 1] * c - S[k - 1] * s
        S[k] = S[k - 1] * c + C[k - 1] * s
    return C, S


def circle_moments(X: np.ndarray, K: int) -> np.ndarray:
    """S_k = (1/n) Σ_j e^{-ikθ_j} for k = 0..K: |S_k| is the Fourier amplitude of mode k of the
    empirical measure."""
    C, S = harmonics(X, K)
    return np.concatenate([[1.0 + 0j], C.mean(axis=1) - 1j * S.mean(axis=1)])


def circle_velocity(X: np.ndarray, beta: float, form: str, rate: float = 1.0, K: int | None = None) -> np.ndarray:
    """The same velocity on S¹ in O(nK): with e^{β cos ψ} = Σ_k I_k(β) e^{ikψ},
    (1/n) Σ_j e^{β cos(θ_i−θ_j)} = I_0 + 2 Σ_{k>=1} I_k (a_k cos kθ_i + b_k sin kθ_i) with
    a_k, b_k the particles' mean cos kθ, sin kθ; θ̇_i is (1/β) ∂_θ of it (USA), divided by it for
    SA. Exact up to the truncation at K (default :func:`fourier_cutoff`)."""
    if form not in FORMS:
        raise ValueError(f"unknown form {form!r}; known: {', '.join(FORMS)}")
    K = fourier_cutoff(float(beta)) if K is None else K
    C, S = harmonics(X, K)
    a, b = C.mean(axis=1), S.mean(axis=1)
    k = np.arange(1, K + 1)
    Ik = special.ive(k, beta)  # I_k e^{-β}
    theta_dot = (2.0 / beta) * ((k * Ik * b) @ C - (k * Ik * a) @ S)
    if form == "sa":
        theta_dot /= (special.ive(0, beta) + 2.0 * ((Ik * a) @ C + (Ik * b) @ S)) * rate
    else:
        theta_dot *= math.exp(beta - math.log(rate))
    return theta_dot[:, None] * np.stack([-X[:, 1], X[:, 0]], axis=1)


def angle_velocity(theta: np.ndarray, beta: float, form: str = "usa", rate: float = 1.0) -> np.ndarray:
    """The circle dynamics in the authors' angle form (reference implementation, O(n²) memory)."""
    diff = theta[:, None] - theta[None, :]
    w = np.exp(beta * np.cos(diff))
    num = -(w * np.sin(diff)).sum(axis=1)
    den = w.sum(axis=1) if form == "sa" else np.full(len(theta), float(len(theta)))
    return num / den / rate


def interaction(X: np.ndarray, beta: float) -> float:
    """(1/n²) Σ_{i,j} e^{β(⟨x_i,x_j⟩−1)} = 2β e^{-β} E(x): non-decreasing along both flows.
    On S¹ it is e^{-β} Σ_k I_k(β) |S_k|² (O(nK)); otherwise the direct double sum."""
    if X.shape[1] == 2:
        K = fourier_cutoff(float(beta))
        S = circle_moments(X, K)
        k = np.arange(0, K + 1)
        return float(np.sum(special.ive(k, beta) * np.abs(S) ** 2 * np.where(k == 0, 1.0, 2.0)))
    n, total = X.shape[0], 0.0
    for lo in range(0, n, BLOCK):
        W = X[lo:lo + BLOCK] @ X.T
        W -= 1.0
        W *= beta
        total += float(np.exp(W, out=W).sum())
    return total / n**2


def lipschitz_bound(beta: float, form: str, rate: float = 1.0) -> float:
    """A Lipschitz constant of the velocity in the max-over-particles norm (our bound): SA's
    softmax weights move by at most 4βε in l1 when every particle moves by ε, giving 3 + 4β;
    USA's weights sum to at most e^β, giving (3 + 2β) e^β. Divided by the time unit ``rate``."""
    natural = 3 + 4 * beta if form == "sa" else (3 + 2 * beta) * math.exp(beta)
    return natural / rate


def retract(X: np.ndarray) -> tuple[np.ndarray, float]:
    """Back onto the sphere; returns the points and the defect max_i ||x_i| − 1| removed."""
    r = np.linalg.norm(X, axis=1)
    return X / r[:, None], float(np.max(np.abs(r - 1.0)))


# Dormand–Prince 5(4) tableau (the field is autonomous, so the nodes c_i are not needed)
_A = ((), (1 / 5,), (3 / 40, 9 / 40), (44 / 45, -56 / 15, 32 / 9),
      (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
      (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656))
_B = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84)
_E = (71 / 57600, 0.0, -71 / 16695, 71 / 1920, -17253 / 339200, 22 / 525, -1 / 40)  # b5 − b4 (7 stages, FSAL)


@dataclass
class Stats:
    """Cost and accuracy bookkeeping of one integration."""

    steps: int = 0
    rejected: int = 0
    evals: int = 0
    max_defect: float = 0.0
    """largest ||x_i| − 1| any step produced before its retraction"""
    dt_min: float = math.inf
    dt_max: float = 0.0


def integrate(X0: np.ndarray, f: Callable[[np.ndarray], np.ndarray], t_obs: np.ndarray,
              observe: Callable[[float, np.ndarray], bool], method: str = "dopri5",
              dt: float | None = None, rtol: float = 1e-6, atol: float = 1e-8) -> Stats:
    """Integrate Ẋ = f(X) on the sphere, calling ``observe(t, X)`` at each time of ``t_obs``
    (increasing, t_obs[0] = start); it returns True to stop early. ``method``: "dopri5"
    (adaptive Dormand–Prince 5(4); the RMS over components of the error estimate, each against
    atol + rtol |x|, must stay <= 1) or "rk4"
    (classical Runge–Kutta with the fixed step ``dt``). Steps are shortened to land on t_obs."""
    if method not in ("dopri5", "rk4"):
        raise ValueError(f"unknown integrator {method!r}; known: dopri5, rk4")
    if method == "rk4" and not dt:
        raise ValueError("rk4 needs a step dt")
    st = Stats()
    X, t = X0.copy(), float(t_obs[0])
    if observe(t, X):
        return st
    h = dt if dt else 1e-2 * (t_obs[-1] - t_obs[0]) / max(len(t_obs), 1)
    k1 = None
    for t_next in t_obs[1:]:
        while t < t_next - 1e-12 * max(1.0, abs(t_next)):
            step = min(h, t_next - t)
            if method == "rk4":
                X, t = _rk4(f, X, step, st), t + step
                continue
            if k1 is None:
                k1 = f(X)
                st.evals += 1
            Xn, k7, err = _dopri_step(f, X, k1, step, rtol, atol, st)
            factor = 0.9 * err ** -0.2 if err > 0 else 5.0
            if err <= 1.0:
                X, defect = retract(Xn)
                st.max_defect = max(st.max_defect, defect)
                t += step
                st.steps += 1
                st.dt_min, st.dt_max = min(st.dt_min, step), max(st.dt_max, step)
                # FSAL: the last stage is reused at the retracted point, an O(defect) change of the
                # first stage; the defect is at most the accepted local error, so below tolerance
                k1 = k7
                if step == h or factor < 1.0:  # a step shortened to hit t_obs says nothing about h
                    h = step * min(5.0, max(0.2, factor))
            else:
                st.rejected += 1
                h = step * max(0.2, factor)
        if observe(t, X):
            return st
    return st


def _rk4(f, X, h, st: Stats) -> np.ndarray:
    k1 = f(X)
    k2 = f(X + 0.5 * h * k1)
    k3 = f(X + 0.5 * h * k2)
    k4 = f(X + h * k3)
    X, defect = retract(X + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4))
    st.evals += 4
    st.steps += 1
    st.max_defect = max(st.max_defect, defect)
    st.dt_min, st.dt_max = min(st.dt_min, h), max(st.dt_max, h)
    return X


def _dopri_step(f, X, k1, h, rtol, atol, st: Stats):
    ks = [k1]
    for i in range(1, 6):
        ks.append(f(X + h * sum(a * k for a, k in zip(_A[i], ks) if a)))
    Xn = X + h * sum(b * k for b, k in zip(_B, ks) if b)
    k7 = f(Xn)
    ks.append(k7)
    st.evals += 6
    err_vec = h * sum(e * k for e, k in zip(_E, ks) if e)
    scale = atol + rtol * np.maximum(np.abs(X), np.abs(Xn))
    err = float(np.sqrt(np.mean((err_vec / scale) ** 2)))
    return Xn, k7, err
