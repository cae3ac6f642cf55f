"""sphere_flow on Ray: one Ray task per simulation cell, (β, d, seed, form, n) for the particle
experiments and one per noise realisation of the PDE. The cells are deterministic simulations on
a grid, not a search, so they are plain tasks rather than Tune trials."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import ray

from ...config import ConfigError
from ...runtime import RunContext
from . import growth, pde, simulate
from .analysis import analyse
from .config import Config

CIRCLE_HORIZON = 50.0
"""cap on the circle/sphere runs, which stop soon after the linear phase (time units of 1/λ_{k*})"""
PDE_DAMPING = 0.1
"""largest share of λ_{k*} the PDE scheme's numerical diffusion may take on the chosen grid"""
GRAM_MEMORY = 2**31
"""bytes the n x n Gram matrix of one d >= 4 observation may take (d = 2 and 3 use harmonics)"""


def prepare(cfg: Config) -> list[dict[str, Any]]:
    """Every cell the run needs, checked before Ray starts."""
    s = cfg.sphere
    if s.d >= 4 and s.n**2 * 8 > GRAM_MEMORY:
        raise ConfigError(f"sphere.n: {s.n} tokens need {s.n**2 * 8 / 2**30:.1f} GiB per observation in d = {s.d} "
                          f"(at most {int(math.sqrt(GRAM_MEMORY / 8))} tokens)")
    p = cfg.pde
    k = growth.k_star(p.beta, 2)
    ks = np.arange(1, growth.max_degree(p.beta) + 1)
    lf = pde.discrete_rates(p.beta, p.grid, ks, p.form, p.courant)
    if lf[k - 1] < 1 - PDE_DAMPING or int(np.argmax(lf)) + 1 != k:
        # on too coarse a grid the scheme's numerical diffusion, not the PDE, would pick the pattern
        raise ConfigError(f"pde.grid: on {p.grid} cells the Lax-Friedrichs diffusion slows mode k* = {k} of beta = "
                          f"{p.beta:g} by {1 - lf[k - 1]:.0%} (at most {PDE_DAMPING:.0%}); use more cells")
    return cells(cfg)


def cells(cfg: Config) -> list[dict[str, Any]]:
    """Every simulation, the costliest experiments first (the last tasks to finish are short)."""
    out = []
    c, m, s, p, mn = cfg.circle, cfg.metastable, cfg.sphere, cfg.pde, cfg.metastable_n
    for n in sorted(mn.ns, reverse=True):
        for seed in range(mn.seeds):
            out.append({"experiment": "metastable_n", "beta": mn.beta, "d": 2, "form": mn.form, "n": n, "seed": seed,
                        "horizon": mn.horizon, "snapshots": 0})
    for beta in m.betas:
        for form in m.forms:
            for seed in range(m.seeds):
                out.append({"experiment": "metastable", "beta": beta, "d": 2, "form": form, "n": m.n, "seed": seed,
                            "horizon": m.horizon, "snapshots": m.snapshots if seed == 0 else 0})
    for seed in range(p.seeds):
        out.append({"experiment": "pde", "beta": p.beta, "d": 2, "form": p.form, "n": p.grid, "seed": seed})
    for beta in s.betas:
        for form in s.forms:
            for seed in range(s.seeds):
                out.append({"experiment": "sphere", "beta": beta, "d": s.d, "form": form, "n": s.n, "seed": seed,
                            "horizon": CIRCLE_HORIZON, "after_linear": s.after_linear if seed == 0 else 0.0,
                            "snapshots": 2 if seed == 0 else 0})
    for beta in c.betas:
        for form in c.forms:
            for seed in range(c.seeds):
                out.append({"experiment": "circle", "beta": beta, "d": 2, "form": form, "n": c.n, "seed": seed,
                            "horizon": CIRCLE_HORIZON, "after_linear": c.after_linear if seed == 0 else 0.0,
                            "snapshots": 0})
    return out


def common_of(cfg: Config) -> dict[str, Any]:
    """The settings every cell shares."""
    return {"root": cfg.seed, "threshold": cfg.threshold, "dt_obs": cfg.dt_obs, "integrator": cfg.integrator,
            "rtol": cfg.rtol, "atol": cfg.atol, "rk4_safety": cfg.rk4_safety,
            "clustering": cfg.clustering.model_dump(), "pde": cfg.pde.model_dump()}


def simulate_cell(cell: dict[str, Any], common: dict[str, Any]) -> dict[str, Any]:
    """One cell start to finish (a Ray task in :func:`run`)."""
    if cell["experiment"] == "pde":
        p = common["pde"]
        start = pde.white_noise_start(cell["n"], p["sigma"], cell["seed"], common["root"])
        return pde.solve(cell["beta"], start, p["horizon"], form=cell["form"], courant=p["courant"],
                         dt_obs=common["dt_obs"], keep_density=10 if cell["seed"] == 0 else 0)
    clustering = simulate.Clustering(**common["clustering"]) if cell["d"] == 2 else None
    return simulate.particles(
        cell["beta"], cell["d"], cell["form"], cell["n"], cell["seed"], cell["horizon"], root=common["root"],
        threshold=common["threshold"], stop_after_linear=cell.get("after_linear"), dt_obs=common["dt_obs"],
        clustering=clustering, snapshots=cell["snapshots"], integrator=common["integrator"], rtol=common["rtol"],
        atol=common["atol"], rk4_safety=common["rk4_safety"])


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    todo = ctx.inputs
    common_ref = ray.put(common_of(cfg))
    task = ray.remote(num_cpus=1)(simulate_cell)
    refs = [task.remote(cell, common_ref) for cell in todo]  # costliest experiments first
    kinds = ", ".join(f"{sum(c['experiment'] == e for c in todo)} {e}"
                      for e in ("metastable_n", "metastable", "sphere", "circle", "pde"))
    ctx.say("%d simulations in Ray tasks (%s) ...", len(todo), kinds)
    outs = ctx.wait_all(refs, "simulations")
    for cell, out in zip(todo, outs):
        ctx.log(**cell, **{k: out[k] for k in ("k_star", "t_end", "seconds", "steps") if k in out},
                dominant=out.get("linear", {}).get("dominant"), energy_max_drop=out.get("energy_max_drop"),
                max_defect=out.get("max_defect"), plateau=out.get("plateau"), pattern=out.get("pattern"))
    return analyse(cfg, todo, outs)


# ----------------------------------------------------------------------------- plan


TASK_BASE_BYTES = 200 * 2**20
"""a Ray worker process with numpy and scipy imported, before any array"""


def _cell_bytes(cell: dict[str, Any], cfg: Config) -> float:
    """What one cell holds at its peak, from the arrays the integrator and the observables make:
    the dopri5 state (about 12 arrays of n x d); on the circle the cos/sin harmonics up to the
    Fourier cutoff (2 K x n); in d = 3 a BLOCK x n block of the interaction and the spherical
    harmonics of the amplitudes ((L+1)(2L+1) x n complex); for d >= 4 the n x n Gram matrix and its
    three Gegenbauer iterates; the PDE a few arrays of the grid and the densities it keeps."""
    from .dynamics import BLOCK, fourier_cutoff

    n, d = cell["n"], cell["d"]
    if cell["experiment"] == "pde":
        return TASK_BASE_BYTES + 8.0 * n * (20 + 10 * 2 + cfg.pde.horizon / cfg.dt_obs / 10)
    L = max(2 * growth.k_star(cell["beta"], d) + 2, 8)
    state = 8.0 * n * d * 12 + 4.0 * n * d * cell.get("snapshots", 0)
    if d == 2:
        return TASK_BASE_BYTES + state + 8.0 * n * 2 * max(fourier_cutoff(float(cell["beta"])), L)
    if d == 3:
        return TASK_BASE_BYTES + state + 8.0 * min(BLOCK, n) * n + 16.0 * (L + 1) * (2 * L + 1) * n
    return TASK_BASE_BYTES + state + 4 * 8.0 * n * n


def plan(cfg: Config) -> list:
    """One Ray task per cell of :func:`cells` (what prepare hands to :func:`run`); memory: the
    costliest cell (:func:`_cell_bytes`)."""
    from ...plan import Tasks

    todo = cells(cfg)
    worst = max(todo, key=lambda c: _cell_bytes(c, cfg))
    kinds = ", ".join(f"{sum(c['experiment'] == e for c in todo)} {e}"
                      for e in ("metastable_n", "metastable", "sphere", "circle", "pde"))
    return [Tasks("simulations", None, len(todo), _cell_bytes(worst, cfg),
                  note=f"{kinds}; memory: the costliest cell ({worst['experiment']}, n = {worst['n']:,}, "
                       f"d = {worst['d']}, beta = {worst['beta']:g}): the integrator's state and the harmonics or "
                       "interaction block it evaluates (_cell_bytes); adaptive steps, so no FLOP count")]
