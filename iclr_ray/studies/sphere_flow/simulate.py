"""One particle simulation, start to finish (no Ray, no I/O): n i.i.d. uniform tokens on
S^{d-1}, integrated in units of the form's own 1/λ_{k*} and observed on a time grid: mode
amplitudes, the interaction energy, cluster counts (circle), and a few snapshots."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from . import dynamics, growth, observables


@dataclass(frozen=True)
class Clustering:
    """Cluster counting on the circle (observables.circle_clusters): gap and extent in radians,
    min_mass as a share of the tokens."""

    gap: float = 0.1
    extent: float = 0.3
    min_mass: float = 0.01


def time_grid(linear_until: float, dt_linear: float, horizon: float, log_points: int) -> np.ndarray:
    """Evenly spaced observations through the linear phase, log-spaced after it up to horizon."""
    lin = np.arange(0.0, min(linear_until, horizon) + 1e-9, dt_linear)
    if horizon <= lin[-1] + 1e-9:
        return lin
    return np.concatenate([lin, np.geomspace(lin[-1], horizon, log_points + 1)[1:]])


def particles(beta: float, d: int, form: str, n: int, seed: int, horizon: float, *, root: int = 0,
              threshold: float = 0.2, stop_after_linear: float | None = None, dt_obs: float = 0.1,
              linear_until: float = 12.0, log_points: int = 80, modes: int | None = None,
              clustering: Clustering | None = Clustering(), snapshots: int = 0, integrator: str = "dopri5",
              rtol: float = 1e-6, atol: float = 1e-9, rk4_safety: float = 1.0) -> dict:
    """Simulate and observe one cell. Time is τ = λ_{k*} t (λ of this form). With
    ``stop_after_linear`` the run ends that many time units after the linear phase ends (the
    largest amplitude reaching ``threshold``), else at ``horizon`` or when one cluster is left."""
    k_star = growth.k_star(beta, d)
    rate = float(growth.rates(beta, d, [k_star], form)[0])
    L = modes or max(2 * k_star + 2, 8)
    rng = np.random.default_rng([root, seed, d, n])  # the same start for every beta and form
    X0 = dynamics.uniform_sphere(n, d, rng)
    if d == 2:
        K = dynamics.fourier_cutoff(float(beta))

        def f(X):
            return dynamics.circle_velocity(X, beta, form, rate, K)
    else:
        def f(X):
            return dynamics.velocity(X, beta, form, rate)

    t_obs = time_grid(linear_until, dt_obs, horizon, log_points)
    rec: dict[str, list] = {"t": [], "amps": [], "energy": [], "count": []}
    snaps: list = []
    snap_at = set(np.linspace(0, len(t_obs) - 1, snapshots).round().astype(int).tolist()) if snapshots else set()
    state = {"t_lin": None, "i": 0}

    def observe(t: float, X: np.ndarray) -> bool:
        amps = observables.mode_amplitudes(X, L)
        rec["t"].append(t)
        rec["amps"].append(amps)
        rec["energy"].append(dynamics.interaction(X, beta))
        count = (observables.circle_clusters(X, clustering.gap, clustering.extent, clustering.min_mass)[0]
                 if d == 2 and clustering else 0)
        rec["count"].append(count)
        if state["t_lin"] is None and amps.max() >= threshold:
            state["t_lin"] = t
        if stop_after_linear is not None:
            done = state["t_lin"] is not None and t >= state["t_lin"] + stop_after_linear
        else:
            done = count == 1  # everything merged: nothing more happens
        if snapshots and (state["i"] in snap_at or done):
            snaps.append({"t": t, "x": X.astype(np.float32)})
        state["i"] += 1
        return done

    start = time.perf_counter()
    kw = ({"dt": rk4_safety / dynamics.lipschitz_bound(beta, form, rate)} if integrator == "rk4"
          else {"rtol": rtol, "atol": atol})
    stats = dynamics.integrate(X0, f, t_obs, observe, method=integrator, **kw)
    seconds = time.perf_counter() - start
    t = np.array(rec["t"])
    amps = np.array(rec["amps"])
    energy = np.array(rec["energy"])
    drops = np.maximum(energy[:-1] - energy[1:], 0.0) / energy[:-1] if len(energy) > 1 else np.zeros(1)
    lin = observables.linear_phase(t, amps, threshold)
    out = {
        "beta": beta, "d": d, "form": form, "n": n, "seed": seed, "k_star": k_star, "rate": rate,
        "time_unit": f"1/lambda_{k_star} of the {form.upper()} form",
        "t": t, "amps": amps, "energy": energy, "count": np.array(rec["count"]),
        "linear": lin, "energy_max_drop": float(drops.max()) if drops.size else 0.0,
        "max_defect": stats.max_defect, "steps": stats.steps, "rejected": stats.rejected, "evals": stats.evals,
        "dt_min": stats.dt_min, "dt_max": stats.dt_max, "t_end": float(t[-1]), "seconds": seconds,
        "snapshots": snaps,
    }
    if d == 2 and clustering:
        out["plateau"] = observables.plateau(t, out["count"])
    return out
