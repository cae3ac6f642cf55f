"""Rollouts outside RLlib's sampling: recording demonstrations with seeds, and evaluation
episodes on held-out seeds (success rate, return, mean action jerk, an optional frame strip).
No Ray; the env comes from ``rl.envs.make_env``."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .envs import make_env
from .store import Demos

Act = Callable[[np.ndarray], np.ndarray]
"""(obs_dim,) -> (act_dim,) in [-1, 1]"""


def action_jerk(actions: np.ndarray) -> float:
    """Mean norm of the second difference a_t - 2 a_{t-1} + a_{t-2} over an episode (0 if < 3 steps)."""
    a = np.asarray(actions, dtype=np.float64)
    if len(a) < 3:
        return 0.0
    return float(np.linalg.norm(a[2:] - 2 * a[1:-1] + a[:-2], axis=-1).mean())


def episode(env, act: Act, seed: int, frames: bool = False) -> dict[str, Any]:
    frames = frames and getattr(env.unwrapped, "render_mode", None) is not None  # ManiSkill here: no renderer
    obs, info = env.reset(seed=seed)
    observations, actions, rewards, images = [obs], [], [], []
    success = bool(info.get("success", False))
    while True:
        if frames:
            images.append(env.unwrapped.render())
        a = np.asarray(act(obs), dtype=np.float32)
        obs, r, term, trunc, info = env.step(a)
        observations.append(obs)
        # the executed actions: every env here clips its actions to [-1, 1]^n (a decorated action
        # a_base + alpha * a_res may leave the box); a chunked env (rl.envs.ChunkActions) reports its own
        done = info["executed"][: info["executed_steps"]] if "executed" in info else [a]
        actions.extend(np.clip(done, -1.0, 1.0))
        rewards.append(r)
        success |= bool(info.get("success", False))
        if term or trunc:
            break
    return {"obs": np.asarray(observations, dtype=np.float32), "actions": np.asarray(actions, dtype=np.float32),
            "return": float(np.sum(rewards)), "success": success, "length": len(actions), "seed": seed,
            "frames": images}


def evaluate(env_config: dict[str, Any], act: Act, seed: int, episodes: int, frames: int = 0) -> dict[str, Any]:
    """Success rate, mean return, episode length and action jerk over episodes seeded seed .. seed +
    episodes - 1, and each episode's own (``successes`` 0/1, ``jerks``, ``returns``, in seed order:
    the units an interval resamples, paired across policies evaluated on the same seeds);
    ``frames``: keep the rendered frames of the first episode, every frames-th one (none where the
    env has no render mode)."""
    env = make_env(env_config)
    eps = [episode(env, act, seed + i, frames=bool(frames) and i == 0) for i in range(episodes)]
    env.close()
    successes = [int(e["success"]) for e in eps]
    jerks = [action_jerk(e["actions"]) for e in eps]
    returns = [e["return"] for e in eps]
    return {"success": float(np.mean(successes)), "return": float(np.mean(returns)),
            "length": float(np.mean([e["length"] for e in eps])), "jerk": float(np.mean(jerks)),
            "successes": successes, "jerks": jerks, "returns": returns,
            "frames": eps[0]["frames"][::frames] if frames else []}


def record_demos(env_config: dict[str, Any], planner: Callable[[np.ndarray, Any], np.ndarray], episodes: int,
                 seed: int, noise: float) -> Demos:
    """Episodes of ``planner(obs, env)`` with N(0, noise^2) added to each executed action (clipped),
    seeded seed, seed + 1, ...; the recorded actions are the executed ones."""
    env = make_env(env_config)
    rng = np.random.default_rng(seed)
    raw = env.unwrapped

    def act(obs):
        a = planner(obs, raw) + noise * rng.standard_normal(env.action_space.shape)
        return np.clip(a, -1.0, 1.0)

    eps = [episode(env, act, seed + i) for i in range(episodes)]
    env.close()
    return Demos.from_episodes([(e["obs"], e["actions"]) for e in eps], [e["seed"] for e in eps],
                               [e["success"] for e in eps])
