"""Arm pulls per second of mab_cs's vectorised engine (many runs advanced together as numpy arrays)
against a straightforward per-step Python loop of the same policy (CS-UCB, plain floats, one run
at a time, its reward table drawn up front), on the same instance and the same counter-based
rewards; the loop's pulls are checked to be the engine's. Also: the engine stepping a single run (numpy on 1 x K arrays), and PE-CS, whose
settled runs the engine accounts in one block; and the RLlib engine (an RLlib Algorithm whose env
runners step all the runs of a cell at once, one episode per cell) on a shorter horizon, checked
to pull the same arms.

    python benchmarks/bandit_engine.py [--T 20000] [--runs 200] [--loop-runs 3] [--rllib-T 5000]
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

from iclr_ray.studies.mab_cs.bandit import reward_uniforms, run_keys
from iclr_ray.studies.mab_cs.data import SYNTH10
from iclr_ray.studies.mab_cs.engine import simulate


def cs_ucb_loop(mu, cost, T: int, alpha: float, key) -> list[int]:
    """CS-UCB for one run, written the obvious way: a Python loop over steps and arms, with the
    run's K x T reward table drawn up front (as the official code does, here from the same
    counter-based uniforms, so the pulls can be compared)."""
    K = len(mu)
    table = (reward_uniforms(key, 1, T, K)[0] < np.asarray(mu)).astype(float).tolist()
    n, s, arms = [0] * K, [0.0] * K, []
    width = 2.0 * math.log(T)
    for t in range(1, T + 1):
        if t <= K:
            a = t - 1
        else:
            idx = [min(s[i] / n[i] + math.sqrt(width / n[i]), 1.0) for i in range(K)]
            ref = (1.0 - alpha) * max(idx)
            a = min((i for i in range(K) if idx[i] >= ref), key=lambda i: cost[i])  # costs distinct here
        n[a] += 1
        s[a] += table[t - 1][a]
        arms.append(a)
    return arms


def rllib_rates(inst, alpha: float, T: int, runs: int) -> dict[int, tuple[float, bool]]:
    """Pulls/s of the RLlib engine with 0 (the driver's own) and 2 env runners: four cells (CS-UCB
    at four alphas) of ``runs`` runs each, every env step pulling an arm in all of a cell's runs."""
    import ray

    from iclr_ray.runtime import connect
    from iclr_ray.studies.mab_cs.run import simulate_rllib_cells

    alphas = [alpha, alpha / 2, alpha * 1.5, alpha / 4]
    cells = [{"instance": inst.name, "policy": "cs_ucb", "setting": "subsidy", "alpha": a, "T": T, "runs": runs}
             for a in alphas]
    refs = [simulate(inst, "cs_ucb", "subsidy", a, T, seed=0, runs=range(runs), record_arms=True) for a in alphas]
    out = {}
    with connect(None):
        ray.get(ray.put(0))
        for runners in (0, 2):
            t0 = time.perf_counter()
            traces = simulate_rllib_cells(cells, {inst.name: inst}, seed=0, env_runners=runners)
            out[runners] = (len(cells) * runs * T / (time.perf_counter() - t0),
                            all(np.array_equal(tr.arms, ref.arms) for tr, ref in zip(traces, refs)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--loop-runs", type=int, default=3)
    ap.add_argument("--rllib-T", type=int, default=5000)
    ap.add_argument("--rllib-runs", type=int, default=50)
    args = ap.parse_args()
    inst, alpha, T = SYNTH10, 0.2, args.T

    t0 = time.perf_counter()
    vec = simulate(inst, "cs_ucb", "subsidy", alpha, T, seed=0, runs=range(args.runs), record_arms=True)
    vec_rate = args.runs * T / (time.perf_counter() - t0)

    t0 = time.perf_counter()
    loops = [cs_ucb_loop(inst.mu, inst.cost, T, alpha, run_keys(0, [r])) for r in range(args.loop_runs)]
    loop_rate = args.loop_runs * T / (time.perf_counter() - t0)
    same = all(np.array_equal(np.array(arms), vec.arms[r]) for r, arms in enumerate(loops))

    t0 = time.perf_counter()
    for r in range(args.loop_runs):
        simulate(inst, "cs_ucb", "subsidy", alpha, T, seed=0, runs=[r])
    single_rate = args.loop_runs * T / (time.perf_counter() - t0)

    t0 = time.perf_counter()
    pecs = simulate(inst, "pe_cs", "subsidy", alpha, 1_000_000, seed=0, runs=range(args.runs))
    pecs_rate = args.runs * 1_000_000 / (time.perf_counter() - t0)

    rllib = rllib_rates(inst, alpha, args.rllib_T, args.rllib_runs)

    print(f"instance {inst.name} (K = {inst.K}), alpha {alpha}, T = {T}")
    print(f"CS-UCB, per-step Python loop, 1 run at a time: {loop_rate:12,.0f} pulls/s")
    print(f"CS-UCB, vectorised engine, 1 run:               {single_rate:12,.0f} pulls/s")
    print(f"CS-UCB, vectorised engine, {args.runs} runs together: {vec_rate:12,.0f} pulls/s")
    print(f"PE-CS, vectorised engine, {args.runs} runs, T = 1e6:  {pecs_rate:12,.0f} pulls/s "
          f"({pecs.stepped:,} of 1,000,000 steps stepped, the rest after every run had settled)")
    print(f"identical pulls (loop vs engine, {args.loop_runs} runs): {same}")
    for runners, (rate, same_rl) in rllib.items():
        print(f"CS-UCB, RLlib engine, {runners} env runner(s), 4 cells of {args.rllib_runs} runs, T = {args.rllib_T}: "
              f"{rate:8,.0f} pulls/s "
              f"(building the Algorithm and its env runners included; same pulls as the vectorised engine: {same_rl})")
    print(f"ratio vectorised / loop: {vec_rate / loop_rate:.1f}x (CS-UCB), {pecs_rate / loop_rate:.0f}x (PE-CS)")
    for runners, (rate, _) in rllib.items():
        print(f"ratio RLlib ({runners} env runners) / loop: {rate / loop_rate:.3f}x; vectorised / RLlib: "
              f"{vec_rate / rate:.0f}x")


if __name__ == "__main__":
    main()
