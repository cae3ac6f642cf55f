"""mab_cs on Ray: every (experiment, instance, policy, alpha, ell, horizon) cell is split into
chunks of runs, one Ray task per chunk; a task advances its runs together with the vectorised
engine. With ``engine=rllib`` one RLlib Algorithm rolls out every cell instead: each cell is one
episode of the bandit env, whose every env step pulls an arm in all the cell's runs, its policy
living in the env runner's RLModule (iclr_ray/rl/online.py).
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
from .analysis import analyse, window_marks
from .bandit import Instance, Regret, run_keys
from .config import Config
from .engine import Trace, checkpoints, simulate
from .policies import exploration_end, make_policy


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
    tr = simulate(inst, cell["policy"], cell["setting"], cell["alpha"], cell["T"], seed, runs, ell=cell.get("ell"),
                  marks=cell.get("marks", ()), **cfg)
    return _chunk(tr, time.perf_counter() - start)


def _chunk(tr: Trace, seconds: float) -> dict:
    """What the driver keeps of a simulation: curves, pulls, and its pulls made and stepped."""
    runs, T = tr.cost.shape[0], int(tr.times[-1])
    return {"times": tr.times, "cost": tr.cost, "quality": tr.quality, "pulls": tr.pulls, "steps": runs * T,
            "stepped": runs * tr.stepped, "seconds": seconds}


def item_policy(item: int, *, cells: list[dict[str, Any]], costs: list[list[float]], run_ids: list[list[int]],
                seed: int, reward_model: str, kappa: int, etc_factor: float):
    """The vectorised policy of one RLlib item (a whole cell: all its runs), built on the env runner."""
    c = cells[item]
    return make_policy(c["policy"], costs[item], c["T"], run_keys(seed, run_ids[item]), c["alpha"], c["setting"],
                       c.get("ell"), reward_model, kappa, etc_factor)


def simulate_rllib_cells(cells: list[dict[str, Any]], instances: dict[str, Instance], seed: int, *,
                         reward_model: str = "bernoulli", kappa: int = 5, etc_factor: float = 5.0, points: int = 40,
                         env_runners: int = 1, progress=None) -> list[Trace]:
    """Every cell rolled out by one RLlib Algorithm: each cell is one episode (item) of the bandit
    env, all its runs advancing together in each env step, its vectorised policy in the env
    runner's RLModule (``rl.online``); ``env_runners`` env runners play the cells in turn (0: the
    driver's own). A cell's runs are 0..runs-1, or its ``run_ids``. Returns each cell's
    :class:`Trace`, in cell order."""
    from ...rl.online import OnlinePolicyConfig
    from .env import BanditEnv

    order = sorted(range(len(cells)), key=lambda i: -cells[i]["T"] * cells[i]["runs"])  # longest first
    todo = [cells[i] for i in order]
    run_ids = [list(c.get("run_ids", range(c["runs"]))) for c in todo]
    items = [{"mu": list(instances[c["instance"]].mu), "T": c["T"], "runs": ids} for c, ids in zip(todo, run_ids)]
    env_runners = min(env_runners, len(items))
    make = functools.partial(item_policy, cells=todo, costs=[list(instances[c["instance"]].cost) for c in todo],
                             run_ids=run_ids, seed=seed, reward_model=reward_model, kappa=kappa, etc_factor=etc_factor)
    config = (OnlinePolicyConfig()
              .environment(BanditEnv, env_config={"items": items, "seed": seed, "reward_model": reward_model,
                                                  "num_env_runners": env_runners})
              .env_runners(num_env_runners=env_runners, num_cpus_per_env_runner=1)
              .rl_module(model_config={"make_policy": make}))
    algo = config.build_algo()
    done: dict[int, dict[str, Any]] = {}
    try:
        while len(done) < len(items):
            algo.train()
            for it in algo.items:
                if it["item"] not in done and progress is not None:
                    progress.update()
                done.setdefault(it["item"], it)
            algo.items.clear()
    finally:
        algo.stop()
    traces: list[Trace | None] = [None] * len(cells)
    for k, i in enumerate(order):
        traces[i] = trace_of_arms(instances[cells[i]["instance"]], cells[i], done[k]["arms"], points)
    return traces  # type: ignore[return-value]


def trace_of_arms(inst: Instance, cell: dict[str, Any], arms: np.ndarray, points: int) -> Trace:
    """Regret at the checkpoints and pulls at T of runs given by their arms (R x T)."""
    T = cell["T"]
    times = checkpoints(T, points, cell.get("marks", ()))
    regret = Regret(inst, cell["setting"], cell["alpha"], cell.get("ell"))
    cost, quality = np.zeros((len(arms), len(times))), np.zeros((len(arms), len(times)))
    for i, t in enumerate(times):
        cost[:, i], quality[:, i] = regret(np.stack([np.bincount(a[:t], minlength=inst.K) for a in arms]))
    pulls = np.stack([np.bincount(a, minlength=inst.K) for a in arms])
    return Trace(times, cost, quality, pulls, arms.astype(np.int16), T)


def simulate_rllib(inst: Instance, policy: str, setting: str, alpha: float, T: int, seed: int, runs: list[int],
                   ell: int | None = None, reward_model: str = "bernoulli", kappa: int = 5, etc_factor: float = 5.0,
                   points: int = 40, env_runners: int = 1) -> Trace:
    """One cell's runs ``runs`` rolled out by RLlib (:func:`simulate_rllib_cells` for one cell)."""
    cell = {"instance": inst.name, "policy": policy, "setting": setting, "alpha": alpha, "T": T, "ell": ell,
            "runs": len(runs), "run_ids": list(runs)}
    return simulate_rllib_cells([cell], {inst.name: inst}, seed, reward_model=reward_model, kappa=kappa,
                                etc_factor=etc_factor, points=points, env_runners=env_runners)[0]


def cells(cfg: Config, instances: dict[str, Instance]) -> list[dict[str, Any]]:
    """Every simulation the experiments need."""
    out = []
    c = cfg.curves
    for case in c.cases:
        for p in c.policies:
            t_e = exploration_end(p, instances[case.instance].K, c.T, cfg.etc_factor)
            out.append({"experiment": "curves", "instance": case.instance, "policy": p, "setting": "subsidy",
                        "alpha": case.alpha, "T": c.T, "runs": c.runs, "marks": window_marks(t_e, c.T)})
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
    instances = dict(ctx.inputs)
    for gap in cfg.gaps.gaps:
        inst = data.two_arm(gap)
        instances[inst.name] = inst
    todo = cells(cfg, instances)
    common = {"reward_model": cfg.reward, "kappa": cfg.kappa, "etc_factor": cfg.etc_factor, "points": cfg.points}
    runs_total = sum(c["runs"] for c in todo)
    if cfg.engine == "rllib":
        ctx.say("%d simulations of %d runs through one RLlib Algorithm, %d env runner(s), each simulation one "
                "episode whose env steps pull an arm in all its runs ...", len(todo), runs_total, cfg.rllib_env_runners)
        start = time.perf_counter()
        traces = simulate_rllib_cells(todo, instances, cfg.seed, env_runners=cfg.rllib_env_runners,
                                      progress=ctx.progress(len(todo), "simulations"), **common)
        seconds = time.perf_counter() - start
        steps = sum(c["T"] * c["runs"] for c in todo)
        merged = {id(c): [_chunk(tr, seconds * c["T"] * c["runs"] / steps)] for c, tr in zip(todo, traces)}
    else:
        # the costliest tasks first, so the last ones to finish are short
        work = [(cell, runs[i:i + cfg.runs_per_task]) for cell in todo
                for runs in [list(range(cell["runs"]))] for i in range(0, cell["runs"], cfg.runs_per_task)]
        work.sort(key=lambda w: -len(w[1]) * w[0]["T"] * (5 if w[0]["policy"] == "cs_ts" else 1))
        inst_refs = {name: ray.put(instances[name]) for name in {c["instance"] for c in todo}}
        refs = [simulate_chunk.remote(inst_refs[cell["instance"]], cell, cfg.seed, runs, common) for cell, runs in work]
        ctx.say("%d simulations of %d runs in %d Ray tasks (vectorised engine) ...", len(todo), runs_total, len(refs))
        merged = {}
        for (cell, _), out in zip(work, ctx.wait_all(refs, "simulations")):
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
    return analyse(cfg, instances, results)


# ----------------------------------------------------------------------------- plan


TASK_BASE_BYTES = 150 * 2**20
"""a Ray worker process with numpy and scipy imported, before any array"""


def plan(cfg: Config) -> list:
    """The simulations: with the vectorised engine one Ray task per chunk of a cell's runs (the
    same split as :func:`run`); with RLlib one Algorithm whose env runners play every cell. Memory
    from the arrays the engine holds (engine.simulate; trace_of_arms for RLlib)."""
    from ...plan import Tasks
    from ...resources import TaskResources
    from .engine import BLOCK

    instances = dict(data.BUILTIN)
    instances.update({s.name: Instance.make(s.name, s.mu, s.cost) for s in cfg.instances})
    instances.update({i.name: i for i in map(data.two_arm, cfg.gaps.gaps)})
    todo = cells(cfg, instances)
    steps = sum(c["runs"] * c["T"] for c in todo)
    real = [k for k in ("movielens_ratings", "goodreads") if getattr(cfg.real, k) is not None]
    left_out = f"; the real-data instances ({', '.join(real)}) add cells not counted here (read at prepare)" \
        if real else ""
    K = max(instances[c["instance"]].K for c in todo)
    if cfg.engine == "rllib":
        runners = max(1, cfg.rllib_env_runners)
        biggest = max(c["runs"] * c["T"] for c in todo)
        return [Tasks("simulations", TaskResources(cpus_per_task=1), runners, TASK_BASE_BYTES + 2.0 * biggest,
                      note=f"{len(todo)} simulations ({steps:,} pulls) as episodes of one RLlib Algorithm; "
                           f"{cfg.rllib_env_runners} env runner(s) of 1 CPU (0: the driver's own); memory: the "
                           f"largest cell's arms (runs x T int16, {biggest:,}) + a worker process (150 MiB)"
                           + left_out)]
    chunks = [min(cfg.runs_per_task, c["runs"] - i) for c in todo for i in range(0, c["runs"], cfg.runs_per_task)]
    R = max(chunks)
    points = cfg.points + 8  # the checkpoints and a curve's window marks
    per_task = TASK_BASE_BYTES + 8.0 * R * (4 * BLOCK * K + 2 * points + 16 * K)
    return [Tasks("simulations", None, len(chunks), per_task,
                  note=f"{len(todo)} simulations of {sum(c['runs'] for c in todo):,} runs ({steps:,} pulls at most; "
                       f"settled runs are fast-forwarded) in chunks of {cfg.runs_per_task} runs; memory: a block of "
                       f"{BLOCK} steps' reward uniforms and their hashing (4 x R x {BLOCK} x K 8-byte arrays, "
                       f"R = {R}, K = {K}), the regret curves and the policy's (R, K) state + a worker process "
                       "(150 MiB)" + left_out)]
