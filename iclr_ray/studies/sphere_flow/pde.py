"""The mean-field equation on the circle, pseudo-spectral in θ (no Ray, no I/O).

ρ(θ, t) is a probability density on [0, 2π) w.r.t. dθ, ρ̂_k = (1/2π) ∫ ρ e^{-ikθ} dθ, and
W(ψ) = e^{β cos ψ}/β = (1/β) Σ_k I_k(β) e^{ikψ}, so (W*ρ)^_k = (2π/β) I_k(β) ρ̂_k. Then

    USA:  ∂_t ρ = −∂_θ(ρ v),  v = ∂_θ(W*ρ)
    SA:   the same with v = ∂_θ(W*ρ) / (β W*ρ)  (the softmax normaliser ∫ e^{β cos(θ−φ)} ρ(φ) dφ)

Products are formed on the grid of M points with the 2/3 rule (modes above M/3 are kept zero),
and RK4 steps with a CFL-limited step advance it. The mass ρ̂_0 is conserved exactly (the flux
derivative has no k = 0 part). Linearised at ρ_0 = 1/2π, mode k grows at λ_k = k² I_k(β)/β
(USA), divided by I_0(β) for SA. Time is in units of 1/λ_{k*}, as for the particles.

Valid while the solution is resolved: past the linear and quasi-linear phases the density
concentrates into near-Dirac clusters that no fixed grid resolves: their Fourier amplitudes stop
decaying with k. The solver stops when any mode in the top half of the kept ones (M/6 < k <= M/3)
reaches amplitude A_k = 2π|ρ̂_k| >= ``tail_tol`` (the white-noise start has ~σ/√M there), or
when the density dips below −``neg_tol`` times the uniform one (Gibbs oscillations).
"""
from __future__ import annotations

import math
import time

import numpy as np
from scipy import special

from . import growth


class Solver:
    def __init__(self, beta: float, M: int, form: str = "sa"):
        if form not in growth.FORMS:
            raise ValueError(f"unknown form {form!r}; known: {', '.join(growth.FORMS)}")
        self.beta, self.M, self.form = beta, M, form
        self.k = np.arange(M // 2 + 1)
        self.kept = self.k <= M // 3
        self.k_star = growth.k_star(beta, 2)
        self.rate = float(growth.rates(beta, 2, [self.k_star], form)[0])
        # (W*ρ)^_k = (2π/β) I_k ρ̂_k; kept scaled by e^{-β} (ive), the scale restored for USA only
        self.w_hat = 2 * math.pi / beta * special.ive(self.k, beta)
        self.usa_scale = math.exp(beta - math.log(self.rate))

    def velocity(self, rho_hat: np.ndarray) -> np.ndarray:
        """v on the grid, in units of λ_{k*} (rho_hat: rfft(ρ)/M)."""
        conv_hat = self.w_hat * rho_hat
        v = np.fft.irfft(1j * self.k * conv_hat * self.M, n=self.M)
        if self.form == "usa":
            return v * self.usa_scale
        return v / (self.beta * np.fft.irfft(conv_hat * self.M, n=self.M)) / self.rate

    def rhs(self, rho_hat: np.ndarray) -> np.ndarray:
        rho = np.fft.irfft(rho_hat * self.M, n=self.M)
        flux_hat = np.fft.rfft(rho * self.velocity(rho_hat)) / self.M
        return np.where(self.kept, -1j * self.k * flux_hat, 0.0)

    def tail(self, rho_hat: np.ndarray) -> float:
        """The largest amplitude 2π|ρ̂_k| among the top half of the kept modes."""
        top = (self.k > self.M // 6) & self.kept
        return float(2 * math.pi * np.abs(rho_hat[top]).max())


def white_noise_start(M: int, sigma: float, seed: int, root: int = 0) -> np.ndarray:
    """ρ = (1 + σ ξ_m)/2π on the grid, ξ i.i.d. N(0, 1) (uniform plus white noise, as the
    paper's Fig. 4), as dealiased Fourier coefficients; mass exactly 1."""
    xi = np.random.default_rng([root, seed, M]).standard_normal(M)
    rho_hat = np.fft.rfft((1 + sigma * xi) / (2 * math.pi)) / M
    rho_hat[np.arange(len(rho_hat)) > M // 3] = 0.0
    rho_hat[0] = 1 / (2 * math.pi)
    return rho_hat


def solve(beta: float, rho_hat0: np.ndarray, M: int, horizon: float, form: str = "sa", dt_obs: float = 0.1,
          cfl: float = 0.5, dt_max: float = 0.05, tail_tol: float = 1e-2, neg_tol: float = 1e-2,
          modes: int = 12, keep_density: int = 0) -> dict:
    """Integrate from ``rho_hat0`` to ``horizon`` (or until under-resolved), observing the mode
    amplitudes A_k = 2π|ρ̂_k| (k = 1..modes, the particles' |(1/n)Σ e^{ikθ_j}|), the mass and
    the spectral tail every ``dt_obs``; with ``keep_density`` the density itself every that many
    observations."""
    sol = Solver(beta, M, form)
    rho_hat = rho_hat0.astype(complex)
    dtheta = 2 * math.pi / M
    t, next_obs, steps = 0.0, 0.0, 0
    rec: dict[str, list] = {"t": [], "amps": [], "mass": [], "tail": [], "rho_min": []}
    densities: list = []
    stop = "horizon"
    start = time.perf_counter()
    while True:
        if t >= next_obs - 1e-12:
            rho = np.fft.irfft(rho_hat * M, n=M)
            rec["t"].append(t)
            rec["amps"].append(2 * math.pi * np.abs(rho_hat[1:modes + 1]))
            rec["mass"].append(float(2 * math.pi * rho_hat[0].real))
            rec["tail"].append(sol.tail(rho_hat))
            rec["rho_min"].append(float(rho.min() * 2 * math.pi))
            if keep_density and (len(rec["t"]) - 1) % keep_density == 0:
                densities.append({"t": t, "rho": rho * 2 * math.pi})
            next_obs += dt_obs
            if rec["tail"][-1] > tail_tol or rec["rho_min"][-1] < -neg_tol:
                stop = "under-resolved"
                break
            if t >= horizon - 1e-12:
                break
        vmax = float(np.max(np.abs(sol.velocity(rho_hat)))) + 1e-12
        h = min(dt_max, cfl * dtheta / vmax, next_obs - t)
        k1 = sol.rhs(rho_hat)
        k2 = sol.rhs(rho_hat + 0.5 * h * k1)
        k3 = sol.rhs(rho_hat + 0.5 * h * k2)
        k4 = sol.rhs(rho_hat + h * k3)
        rho_hat = rho_hat + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t += h
        steps += 1
    rho = np.fft.irfft(rho_hat * M, n=M)
    last = len(rec["t"]) - (2 if stop == "under-resolved" and len(rec["t"]) > 1 else 1)  # last resolved one
    return {"beta": beta, "M": M, "form": form, "k_star": sol.k_star, "rate": sol.rate,
            "t": np.array(rec["t"]), "amps": np.array(rec["amps"]), "mass": np.array(rec["mass"]),
            "tail": np.array(rec["tail"]), "rho_min": np.array(rec["rho_min"]), "stop": stop,
            "t_end": float(rec["t"][-1]), "t_resolved": float(rec["t"][last]), "steps": steps,
            "seconds": time.perf_counter() - start,
            "rho_final": rho * 2 * math.pi, "densities": densities, "pattern": int(np.argmax(rec["amps"][last]) + 1)}
