"""Demonstrations from an expert trained here, for tasks with neither a planner nor demonstration
files: SAC from scratch on the env's dense reward (RLlib, the same :class:`~iclr_ray.rl.sac.DecoratedSAC`
as the residual runs, on a zero base with alpha 1 and H 0, i.e. plain SAC), whose deterministic
policy is then recorded with action noise by :func:`~iclr_ray.rl.rollouts.record_demos`, seeds
and all. The expert sees single frames (``obs_horizon`` 1), as the planners do."""
from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .. import log as logs
from .sac import SACSettings

log = logs.get(__name__)


def expert_env_config(env_config: dict[str, Any], zero_base: str | None) -> dict[str, Any]:
    """The env an expert trains on: the task's env with the dense reward, one frame, one action per
    step, and the zero base whose (zero) action the residual module reads from the observation."""
    return {**env_config, "reward": "dense", "obs_horizon": 1, "residual_chunk": False, "base": zero_base}


class RecentReturns:
    """The mean return of about the last ``n`` episodes, from RLlib's per-iteration figures (each
    iteration reports the mean return of the episodes that ended in it, NaN when none did, and the
    lifetime episode count)."""

    def __init__(self, n: int):
        self.n, self.seen = n, 0
        self.parts: deque[tuple[float, int]] = deque()  # (mean return, episodes) per iteration

    def add(self, mean: float | None, lifetime_episodes: int) -> None:
        new, self.seen = lifetime_episodes - self.seen, lifetime_episodes
        if new > 0 and mean is not None and np.isfinite(mean):
            self.parts.append((float(mean), new))
            while sum(k for _, k in self.parts) - self.parts[0][1] >= self.n:
                self.parts.popleft()

    def mean(self) -> float:
        total = sum(k for _, k in self.parts)
        return sum(m * k for m, k in self.parts) / total if total else float("nan")


def train_expert(env_config: dict[str, Any], settings: SACSettings, env_steps: int, work_dir: str | Path,
                 seed: int = 0, log_every: int = 10) -> tuple[Callable, list[dict[str, float]]]:
    """SAC from scratch on the dense reward of ``env_config``'s env for ``env_steps`` env steps.

    Returns (act, curve): ``act(obs, env=None)`` is the expert's deterministic action for one
    single-frame observation of the task's env (the planner signature of ``record_demos``), and
    ``curve`` the training's [{"env_steps", "return"}] (mean dense return of about the last 20 episodes),
    one point every ``log_every`` iterations. The RLlib checkpoint is saved in
    ``work_dir/checkpoint``, the zero base its env runners read in ``work_dir/zero_base``
    (``work_dir``: a path or a URI every node reaches)."""
    from .. import storage
    from .base_policies import ZeroPolicy
    from .envs import make_env
    from .sac import module_actor, sac_config
    from .store import save_policy

    probe = make_env(expert_env_config(env_config, None))
    obs_dim, act_dim = int(np.prod(probe.observation_space.shape)), int(np.prod(probe.action_space.shape))
    probe.close()
    zero = save_policy(ZeroPolicy(obs_dim=obs_dim, act_dim=act_dim), storage.join(work_dir, "zero_base"))
    algo = sac_config(expert_env_config(env_config, zero), settings, alpha=1.0, H=0, seed=seed).build_algo()
    curve: list[dict[str, float]] = []
    recent = RecentReturns(20)
    try:
        sampled, it = 0, 0
        while sampled < env_steps:
            r = algo.train()
            it += 1
            sampled = int(r.get("num_env_steps_sampled_lifetime", sampled))
            runners = r.get("env_runners", {})
            recent.add(runners.get("episode_return_mean"), int(runners.get("num_episodes_lifetime", 0)))
            ret = recent.mean()
            if np.isfinite(ret) and (it % log_every == 0 or sampled >= env_steps):
                curve.append({"env_steps": sampled, "return": ret})
                log.info("expert: %d/%d env steps, mean dense return %.2f", sampled, env_steps, ret)
        algo.save_to_path(storage.join(work_dir, "checkpoint"))
        module_act = module_actor(algo.get_module())
    finally:
        algo.stop()
    zeros = np.zeros(act_dim, np.float32)

    def act(obs: np.ndarray, env=None) -> np.ndarray:
        return module_act(np.concatenate([np.asarray(obs, np.float32).reshape(-1), zeros]))

    return act, curve


def expert_demos(env_config: dict[str, Any], settings: SACSettings, env_steps: int, episodes: int, seed: int,
                 noise: float, work_dir: str | Path):
    """Train an expert (:func:`train_expert`) and record ``episodes`` of it on seeds seed, seed + 1,
    ... with N(0, noise^2) action noise; (Demos, training curve)."""
    from .rollouts import record_demos

    act, curve = train_expert(env_config, settings, env_steps, work_dir, seed=seed)
    record_cfg = {**env_config, "obs_horizon": 1, "residual_chunk": False, "base": None}
    return record_demos(record_cfg, act, episodes, seed, noise), curve
