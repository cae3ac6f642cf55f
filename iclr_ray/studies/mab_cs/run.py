"""mab_cs on Ray: every (experiment, instance, policy, alpha, ell, horizon) cell is split into
chunks of runs, one Ray task per chunk; a task advances its runs together with the vectorised
engine. With ``engine=rllib`` each cell is rolled out instead by an RLlib Algorithm whose env
runners play one run per episode, the policy living in the RLModule (iclr_ray/rl/online.py).
Runs are indexed, and run r draws the same rewards in every cell, so policies are compared on
common random numbers."""
from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np
import ray

from ...config import ConfigError
from ...runtime import RunContext
from . import data
from .analysis import analyse
from .bandit import Instance, Regret, run_keys
from .config import Config
from .engine import Trace, checkpoints, simulate
from .policies import make_policy


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
    if cfg.engine == "rllib":
        try:
            import gymnasium  # noqa: F401
            import ray.rllib  # noqa: F401
        except ImportError as exc:
            raise ConfigError(f"engine=rllib needs RLlib ({exc.name} is missing): pip install 'iclr-ray[rl]'") from None
    return instances


@ray.remote(num_cpus=1)
def simulate_chunk(inst: Instance, cell: dict[str, Any], seed: int, runs: list[int], cfg: dict[str, Any]) -> dict:
    start = time.perf_counter()
    tr = simulate(inst, cell["policy"], cell["setting"], cell["alpha"], cell["T"], seed, runs, ell=cell.get("ell"), **cfg)
    return _chunk(tr, time.perf_counter() - start)


def _chunk(tr: Trace, seconds: float) -> dict:
    """What the driver keeps of a simulation: curves, pulls, and its pulls made and stepped."""
    runs, T = tr.cost.shape[0], int(tr.times[-1])
    return {"times": tr.times, "cost": tr.cost, "quality": tr.quality, "pulls": tr.pulls, "steps": runs * T,
            "stepped": runs * tr.stepped, "seconds": seconds}


def one_run_policy(run: int, policy: str, cost: list[float], T: int, seed: int, alpha: float, setting: str,
                   ell: int | None, reward_model: str, kappa: int, etc_factor: float):
    """The policy of a single run (R = 1), as the RLlib module builds it for each episode."""
    return make_policy(policy, cost, T, run_keys(seed, [run]), alpha, setting, ell, reward_model, kappa, etc_factor)


def simulate_rllib(inst: Instance, policy: str, setting: str, alpha: float, T: int, seed: int, runs: list[int],
                   ell: int | None = None, reward_model: str = "bernoulli", kappa: int = 5, etc_factor: float = 5.0,
                   points: int = 40, env_runners: int = 1) -> Trace:
    """The same runs rolled out by RLlib: an Algorithm whose ``env_runners`` env runners each play
    one run per training step (one episode of T pulls), the policy living in the RLModule."""
    from ...rl.online import OnlinePolicyConfig
    from .env import BanditEnv

    env_runners = min(env_runners, len(runs))  # each env runner plays its share of the runs
    make = functools.partial(one_run_policy, policy=policy, cost=list(inst.cost), T=T, seed=seed, alpha=alpha,
                             setting=setting, ell=ell, reward_model=reward_model, kappa=kappa, etc_factor=etc_factor)
    config = (OnlinePolicyConfig()
              .environment(BanditEnv, env_config={"mu": list(inst.mu), "T": T, "seed": seed, "runs": list(runs),
                                                  "reward_model": reward_model, "num_env_runners": env_runners})
              .env_runners(num_env_runners=env_runners, num_cpus_per_env_runner=1)
              .rl_module(model_config={"make_policy": make}))
    algo = config.build_algo()
    try:
        while len({r["run"] for r in algo.runs}) < len(runs):
            algo.train()
    finally:
        algo.stop()
    by_run = {r["run"]: r for r in algo.runs}
    arms = np.stack([by_run[r]["arms"] for r in runs])
    times = checkpoints(T, points)
    regret = Regret(inst, setting, alpha, ell)
    cost, quality = np.zeros((len(runs), len(times))), np.zeros((len(runs), len(times)))
    for i, t in enumerate(times):
        pulls = np.stack([np.bincount(a[:t], minlength=inst.K) for a in arms])
        cost[:, i], quality[:, i] = regret(pulls)
    pulls = np.stack([by_run[r]["policy"].n[0] for r in runs])
    return Trace(times, cost, quality, pulls, arms.astype(np.int16), T)


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
    common = {"reward_model": cfg.reward, "kappa": cfg.kappa, "etc_factor": cfg.etc_factor, "points": cfg.points}
    # the costliest tasks first, so the last ones to finish are short
    work = [(cell, runs[i:i + cfg.runs_per_task]) for cell in todo
            for runs in [list(range(cell["runs"]))] for i in range(0, cell["runs"], cfg.runs_per_task)]
    work.sort(key=lambda w: -len(w[1]) * w[0]["T"] * (5 if w[0]["policy"] == "cs_ts" else 1))
    if cfg.engine == "rllib":
        print(f"  {len(todo)} simulations of {sum(c['runs'] for c in todo)} runs, each through an RLlib "
              f"Algorithm with {cfg.rllib_env_runners} env runner(s) ...", flush=True)
        bar = ctx.progress(len(work), "simulations")
        outs = []
        for cell, runs in work:
            start = time.perf_counter()
            tr = simulate_rllib(instances[cell["instance"]], cell["policy"], cell["setting"], cell["alpha"], cell["T"],
                                cfg.seed, runs, ell=cell.get("ell"), env_runners=cfg.rllib_env_runners, **common)
            outs.append(_chunk(tr, time.perf_counter() - start))
            bar.update()
    else:
        inst_refs = {name: ray.put(instances[name]) for name in {c["instance"] for c in todo}}
        refs = [simulate_chunk.remote(inst_refs[cell["instance"]], cell, cfg.seed, runs, common) for cell, runs in work]
        print(f"  {len(todo)} simulations of {sum(c['runs'] for c in todo)} runs in {len(refs)} Ray tasks "
              f"(vectorised engine) ...", flush=True)
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
