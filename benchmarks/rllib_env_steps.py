"""Env steps per second of Policy Decorator's SAC through RLlib (the residual RLModule, sampling
and learning at the configured update-to-data ratio; sampling alone with no updates) against a
raw gymnasium loop of the same env and the same frozen base policy (a_base from the
observation, no residual), on one process each; and the project's training step
(``rl.sac.DecoratedSAC``: a numpy transition buffer, ready batches to the learner) against
RLlib's own SAC training step with its ``EpisodeReplayBuffer``, same settings. Prints the ratios.

    python benchmarks/rllib_env_steps.py [--suite slot|maniskill|adroit] [--id ID] [--steps 4000]
                                         [--hidden 64 64] [--batch 128] [--utd 0.25]
"""
from __future__ import annotations

import argparse
import tempfile
import time



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="slot")
    ap.add_argument("--id", default="SlotReach")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--utd", type=float, default=0.25)
    ap.add_argument("--envs", type=int, default=4)
    args = ap.parse_args()

    import ray
    import torch

    torch.set_num_threads(1)
    from iclr_ray.rl import base_policies, store
    from iclr_ray.rl.envs import make_env
    from ray.rllib.algorithms.sac import SAC

    from iclr_ray.rl.sac import DecoratedSAC, SACSettings, sac_config

    tmp = tempfile.mkdtemp()
    probe = make_env({"suite": args.suite, "id": args.id})
    n_obs, n_act = probe.observation_space.shape[0], probe.action_space.shape[0]
    probe.close()
    base = store.save_policy(base_policies.build("mlp", obs_dim=n_obs, act_dim=n_act, hidden=(64, 64)), f"{tmp}/base")
    env_cfg = {"suite": args.suite, "id": args.id, "base": str(base), "reward": "shifted", "seed": 0}

    env = make_env(env_cfg)
    obs, _ = env.reset(seed=0)
    t = time.perf_counter()
    for i in range(args.steps):
        obs, r, term, trunc, _ = env.step(obs[-n_act:])
        if term or trunc:
            obs, _ = env.reset(seed=i)
    raw = args.steps / (time.perf_counter() - t)
    print(f"raw gymnasium loop (base action only): {raw:,.0f} env steps/s")

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rates = {}
    runs = (("RLlib sampling only", False, DecoratedSAC),
            ("RLlib SAC, its EpisodeReplayBuffer (sample + learn)", True, SAC),
            ("DecoratedSAC, TransitionBuffer (sample + learn)", True, DecoratedSAC))
    for label, learn, algo_class in runs:
        s = SACSettings(batch=args.batch, hidden=list(args.hidden), utd=args.utd, envs_per_runner=args.envs,
                        rollout_fragment=16, buffer=100_000,
                        learning_starts=(10**9 if not learn else min(1000, args.steps // 4)))
        config = sac_config(env_cfg, s, alpha=0.1, H=0)
        config.algo_class = algo_class
        algo = config.build_algo()
        algo.train()  # warm up (first sample and, when learning, first updates)
        start = algo.train()["num_env_steps_sampled_lifetime"]
        t = time.perf_counter()
        done = start
        while done - start < args.steps:
            done = algo.train()["num_env_steps_sampled_lifetime"]
        rates[label] = (done - start) / (time.perf_counter() - t)
        algo.stop()
        print(f"{label} (hidden {args.hidden}, batch {args.batch}, utd {args.utd}): {rates[label]:,.0f} env steps/s "
              f"(raw/RLlib = {raw / rates[label]:.1f}x)", flush=True)
    stock, ours = rates[runs[1][0]], rates[runs[2][0]]
    print(f"DecoratedSAC / RLlib SAC training step: {ours / stock:.2f}x env steps/s at utd {args.utd}")
    ray.shutdown()


if __name__ == "__main__":
    main()
