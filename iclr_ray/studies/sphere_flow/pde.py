"""The mean-field equation on the circle by the authors' scheme: Lax–Friedrichs on a fine grid
(no Ray, no I/O).

u(θ, t) is a density on [0, 2π) w.r.t. dθ, on M cells θ_j = 2πj/M (the authors' notebook:
linspace(0, 2π, 10⁴) without its endpoint, M = 9999). With K(ψ) = −e^{β cos ψ} sin ψ,

    USA:  ∂_t u = −∂_θ(u v),  v(θ) = ∫ K(θ−φ) u(φ) dφ
    SA:   the same with v divided by the softmax normaliser ∫ e^{β cos(θ−φ)} u(φ) dφ

which is the particles' θ̇_i = −(1/n) Σ_j e^{β cos(θ_i−θ_j)} sin(θ_i−θ_j) for a continuum of
tokens. The velocity is the periodic convolution v_j = dθ Σ_m K(θ_j−θ_m) u_m, evaluated by FFT
(the same sum the notebook forms directly). One step is the conservative Lax–Friedrichs update

    u_j ← (u_{j−1} + u_{j+1})/2 − (dt/2dθ)(f_{j+1} − f_{j−1}),  f = u v,

so the mass dθ Σ_j u_j is conserved exactly and u stays non-negative while the Courant number
dt max|v|/dθ is at most 1. The step is fixed: dt = courant·dθ / sup|v|, with sup|v| the fastest
any probability density can move (max_ψ |K(ψ)| for USA, 1 for SA), so the bound holds for the
whole run; courant = 0.785 is the notebook's dt = 0.02·dθ at β = 5. The averaging adds the
numerical diffusion dθ²/(2dt) (∝ dθ): mode k grows per step by exactly
G_k = cos(k dθ) + dt λ_k sin(k dθ)/(k dθ) in the linear phase (:func:`discrete_rates`), which
tends to e^{λ_k dt} as dθ -> 0. The diffusion keeps clusters a few cells wide, so the scheme runs
through cluster formation, where a spectral scheme stops resolving them.

The start is the notebook's: u = 1/2π + σ ξ_j with i.i.d. ξ_j ~ N(0, 1) per cell (absolute white
noise, so every Fourier mode starts near 2πσ/√M in the amplitude below). Time is reported in
units of 1/λ_{k*} of the form, as for the particles.
"""
from __future__ import annotations

import math
import time

import numpy as np
from scipy import fft

from . import growth

COURANT = 0.785
"""dt·sup|v|/dθ; 0.02·max_ψ e^{5 cos ψ}|sin ψ| = 0.785: the notebook's dt = 0.02·dθ at β = 5"""


def grid(M: int) -> np.ndarray:
    return 2 * math.pi * np.arange(M) / M


def sup_velocity(beta: float, form: str) -> float:
    """The largest |v| any probability density produces: max_ψ e^{β cos ψ}|sin ψ| (USA, at
    cos ψ = (√(1+4β²) − 1)/(2β)), and 1 for SA (a weighted mean of sin)."""
    if form == "sa":
        return 1.0
    c = (math.sqrt(1 + 4 * beta**2) - 1) / (2 * beta)
    return math.exp(beta * c) * math.sqrt(1 - c * c)


class LaxFriedrichs:
    """The scheme on M cells, time in units of 1/λ_{k*} of ``form``."""

    def __init__(self, beta: float, M: int, form: str = "usa", courant: float = COURANT):
        if form not in growth.FORMS:
            raise ValueError(f"unknown form {form!r}; known: {', '.join(growth.FORMS)}")
        self.beta, self.M, self.form = beta, M, form
        self.k_star = growth.k_star(beta, 2)
        self.rate = float(growth.rates(beta, 2, [self.k_star], form)[0])
        self.dx = 2 * math.pi / M
        x = grid(M)
        # kernels scaled by e^{-β} (the largest weight is 1); the USA scale e^β/λ is restored on v
        self.K_hat = fft.rfft(-np.exp(beta * (np.cos(x) - 1)) * np.sin(x)) * self.dx
        self.E_hat = fft.rfft(np.exp(beta * (np.cos(x) - 1))) * self.dx if form == "sa" else None
        self.scale = math.exp(beta - math.log(self.rate)) if form == "usa" else 1.0 / self.rate
        self.dt = courant * self.dx / (sup_velocity(beta, form) / self.rate)

    def velocity(self, u: np.ndarray) -> np.ndarray:
        u_hat = fft.rfft(u)
        v = fft.irfft(self.K_hat * u_hat, n=self.M)
        if self.form == "sa":
            v /= fft.irfft(self.E_hat * u_hat, n=self.M)
        return v * self.scale

    def step(self, u: np.ndarray) -> tuple[np.ndarray, float]:
        """One Lax–Friedrichs step; also the Courant number it ran at."""
        v = self.velocity(u)
        f = u * v
        lam = self.dt / self.dx
        out = 0.5 * (np.roll(u, 1) + np.roll(u, -1)) - 0.5 * lam * (np.roll(f, -1) - np.roll(f, 1))
        return out, float(lam * np.abs(v).max())

    def amplitudes(self, u: np.ndarray, modes: int) -> np.ndarray:
        """A_k = |∫ u e^{-ikθ}| / ∫ u for k = 1..modes: the particles' |(1/n) Σ_j e^{ikθ_j}|."""
        c = fft.rfft(u)[:modes + 1]
        return np.abs(c[1:]) / c[0].real


def discrete_rates(beta: float, M: int, ks, form: str = "usa", courant: float = COURANT) -> np.ndarray:
    """The scheme's own linear growth rate of mode k, log(G_k)/dt with
    G_k = cos(k dθ) + dt λ_k sin(k dθ)/(k dθ), in units of λ_{k*}: what a linear-phase fit on
    this grid should give (it tends to λ_k/λ_{k*} as the grid is refined)."""
    sol = LaxFriedrichs(beta, M, form, courant)
    k = np.asarray(ks, float)
    lam = growth.rates(beta, 2, k, form) / sol.rate
    G = np.cos(k * sol.dx) + sol.dt * lam * np.sin(k * sol.dx) / (k * sol.dx)
    return np.log(G) / sol.dt


def white_noise_start(M: int, sigma: float, seed: int, root: int = 0) -> np.ndarray:
    """u = 1/2π + σ ξ_j, ξ_j i.i.d. N(0, 1) per cell: the notebook's start (absolute noise)."""
    return 1 / (2 * math.pi) + sigma * np.random.default_rng([root, seed, M]).standard_normal(M)


def solve(beta: float, u0: np.ndarray, horizon: float, form: str = "usa", courant: float = COURANT,
          dt_obs: float = 0.1, modes: int = 12, keep_density: int = 0) -> dict:
    """Integrate from ``u0`` to ``horizon`` (units of 1/λ_{k*}), observing the mode amplitudes
    A_1..A_modes and the mass every ``dt_obs`` (at the first step on or past each observation
    time: a shortened step would add its own, larger, numerical diffusion); with
    ``keep_density`` the density itself every that many observations."""
    M = len(u0)
    sol = LaxFriedrichs(beta, M, form, courant)
    u = np.asarray(u0, float).copy()
    mass0 = float(u.sum() * sol.dx)
    rec: dict[str, list] = {"t": [], "amps": [], "mass": [], "u_min": []}
    densities: list = []
    t, steps, next_obs, cfl = 0.0, 0, 0.0, 0.0
    start = time.perf_counter()
    while True:
        if t >= next_obs - 1e-12:
            rec["t"].append(t)
            rec["amps"].append(sol.amplitudes(u, modes))
            rec["mass"].append(float(u.sum() * sol.dx) / mass0)
            rec["u_min"].append(float(u.min() * 2 * math.pi))
            if keep_density and (len(rec["t"]) - 1) % keep_density == 0:
                densities.append({"t": t, "rho": u * 2 * math.pi})
            next_obs += dt_obs
            if t >= horizon - 1e-12:
                break
        u, c = sol.step(u)
        cfl = max(cfl, c)
        t = (steps + 1) * sol.dt
        steps += 1
    amps = np.array(rec["amps"])
    return {"beta": beta, "M": M, "form": form, "k_star": sol.k_star, "rate": sol.rate, "dt": sol.dt,
            "t": np.array(rec["t"]), "amps": amps, "mass": np.array(rec["mass"]), "u_min": np.array(rec["u_min"]),
            "t_end": t, "steps": steps, "courant_max": cfl, "seconds": time.perf_counter() - start,
            "rho_final": u * 2 * math.pi, "densities": densities, "pattern": int(np.argmax(amps[-1]) + 1)}
