"""mab_cs on Ray: every (experiment, instance, policy, alpha, ell, horizon) cell is split into
chunks of runs, one Ray task per chunk; a task advances its runs together with the vectorised
engine (or, with ``engine=rllib``, rolls them out through an RLlib Algorithm, one run at a time).
Runs are indexed, and run r draws the same rewards in every cell, so policies are compared on
common random numbers."""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import ray

from ...config import ConfigError
from ...runtime import RunContext
from . import data
from .analysis import analyse
from .bandit import Instance
from .config import Config
from .engine import simulate


def prepare(cfg: Config) -> dict[str, Instance]:
    """Every instance the run uses, the real-data ones built (and checked) before Ray starts."""
    instances = dict(data.BUILTIN)
    for spec in cfg.instances:
        try:
            instances[spec.name] = Instance.make(spec.name, spec.mu, spec.cost)
        except ValueError as exc:
            raise ConfigError(f"instances: {exc}") from None
    real = cfg.real
    if real.movielens_ratings is not None:
        instances["movielens"] = data.movielens(real.movielens_ratings, real.movielens_movies, real.cost_seed)
    if real.goodreads is not None:
        instances["goodreads"] = data.goodreads(real.goodreads, real.cost_seed)
    for inst in (instances[n] for n in cfg.ell_sweep.instances):
        if max(cfg.ell_sweep.ells) >= inst.K:
            raise ConfigError(f"ell_sweep.ells: {max(cfg.ell_sweep.ells)} is not an arm of {inst.name} (K = {inst.K})")
    if cfg.horizons.ell >= instances[cfg.horizons.instance].K:
        raise ConfigError(f"horizons.ell: {cfg.horizons.ell} is not an arm of {cfg.horizons.instance}")
    return instances


@ray.remote(num_cpus=1)
def simulate_chunk(inst: Instance, cell: dict[str, Any], seed: int, runs: list[int], cfg: dict[str, Any]) -> dict:
    start = time.perf_counter()
    if cfg["engine"] == "rllib":
        from .rllib_engine import simulate_rllib as sim
    else:
        sim = simulate
    tr = sim(inst, cell["policy"], cell["setting"], cell["alpha"], cell["T"], seed, runs, ell=cell.get("ell"),
             reward_model=cfg["reward"], kappa=cfg["kappa"], etc_factor=cfg["etc_factor"], points=cfg["points"])
    return {"times": tr.times, "cost": tr.cost, "quality": tr.quality, "pulls": tr.pulls,
            "steps": len(runs) * cell["T"], "stepped": len(runs) * tr.stepped, "seconds": time.perf_counter() - start}


def cells(cfg: Config, instances: dict[str, Instance]) -> list[dict[str, Any]]:
    """Every simulation the experiments need."""
    out = []
    c = cfg.curves
    for case in c.cases:
        for p in c.policies:
            out.append({"experiment": "curves", "instance": case.instance, "policy": p, "setting": "subsidy",
                        "alpha": case.alpha, "T": c.T, "runs": c.runs})
    h = cfg.horizons
    for T in h.horizons:
        out.append({"experiment": "horizons", "instance": h.instance, "policy": "pe", "setting": "known_ref",
                    "alpha": h.alpha, "ell": h.ell, "T": T, "runs": h.runs})
        out.append({"experiment": "horizons", "instance": h.instance, "policy": "pe_cs", "setting": "subsidy",
                    "alpha": h.alpha, "T": T, "runs": h.runs})
    g = cfg.gaps
    for gap in g.gaps:
        out.append({"experiment": "gaps", "instance": data.two_arm(gap).name, "gap": gap, "policy": "pe",
                    "setting": "known_ref", "alpha": 0.0, "ell": 1, "T": g.T, "runs": g.runs})
    real = [n for n in ("movielens", "goodreads") if n in instances]
    a = cfg.alpha_sweep
    for name in dict.fromkeys([*a.instances, *real]):
        for alpha in a.alphas:
            for p in a.policies:
                out.append({"experiment": "alpha_sweep", "instance": name, "policy": p, "setting": "subsidy",
                            "alpha": alpha, "T": a.T, "runs": a.runs})
    e = cfg.ell_sweep
    for name in dict.fromkeys([*e.instances, *real]):
        for ell in e.ells:
            if ell >= instances[name].K:
                continue
            for p in e.policies:
                out.append({"experiment": "ell_sweep", "instance": name, "policy": p, "setting": "known_ref",
                            "alpha": e.alpha, "ell": ell, "T": e.T, "runs": e.runs})
    return out


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    instances = dict(ctx.inputs if ctx.inputs is not None else prepare(cfg))
    for gap in cfg.gaps.gaps:
        inst = data.two_arm(gap)
        instances[inst.name] = inst
    todo = cells(cfg, instances)
    common = {k: getattr(cfg, k) for k in ("engine", "reward", "kappa", "etc_factor", "points")}
    inst_refs = {name: ray.put(inst) for name, inst in instances.items() if any(c["instance"] == name for c in todo)}
    # the costliest tasks first, so the last ones to finish are short
    work = [(cell, runs[i:i + cfg.runs_per_task]) for cell in todo
            for runs in [list(range(cell["runs"]))] for i in range(0, cell["runs"], cfg.runs_per_task)]
    work.sort(key=lambda w: -len(w[1]) * w[0]["T"] * (5 if w[0]["policy"] == "cs_ts" else 1))
    refs = [simulate_chunk.remote(inst_refs[cell["instance"]], cell, cfg.seed, runs, common) for cell, runs in work]
    print(f"  {len(todo)} simulations of {sum(c['runs'] for c in todo)} runs in {len(refs)} Ray tasks "
          f"({cfg.engine} engine) ...", flush=True)
    outs = ctx.wait_all(refs, "simulations")
    merged: dict[int, list[dict]] = {}
    for (cell, _), out in zip(work, outs):
        merged.setdefault(id(cell), []).append(out)
    results = []
    for cell in todo:
        chunks = merged[id(cell)]
        res = {**cell, "times": chunks[0]["times"],
               "cost": np.concatenate([c["cost"] for c in chunks]),
               "quality": np.concatenate([c["quality"] for c in chunks]),
               "pulls": np.concatenate([c["pulls"] for c in chunks]),
               "steps": sum(c["steps"] for c in chunks), "stepped": sum(c["stepped"] for c in chunks),
               "seconds": sum(c["seconds"] for c in chunks)}
        results.append(res)
        ctx.log(**{k: v for k, v in cell.items()}, final_cost=float(res["cost"][:, -1].mean()),
                final_quality=float(res["quality"][:, -1].mean()), seconds=res["seconds"])
    metrics = analyse(cfg, instances, results)
    from . import plots

    for name, fig in plots.plot_all(metrics).items():
        ctx.save_plot(fig, name)
    return metrics
