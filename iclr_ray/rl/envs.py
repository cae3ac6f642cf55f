"""One env config shape for every residual-RL task, and the wrappers that make them alike.

An env config is a dict (the ``env_config`` RLlib hands to :func:`make_env` on every env runner):

* ``suite``: ``slot`` (our fast sparse task, ``rl.slot``), ``maniskill`` (ManiSkill3 on the CPU
  physics backend, state observations) or ``adroit`` (gymnasium-robotics' Adroit hand tasks);
* ``id``: the task (``SlotReach``, ``PickCube-v1``, ``AdroitHandDoor-v1``, ...);
* ``max_episode_steps``: the time limit (None: the suite's own);
* ``kwargs``: passed to the suite's constructor;
* ``control_mode`` (ManiSkill only, default ``pd_ee_delta_pose``);
* ``obs_horizon``: observation frames stacked (1: none);
* ``base``: a saved base policy directory (``rl.store``) whose action is appended to the
  observation (:class:`BaseActionObs`); None for none;
* ``residual_chunk``: with a base that executes ``act_horizon`` = k > 1 actions of each chunk, one
  step of the env is a whole chunk (:class:`ChunkActions`): the action is k actions flattened, the
  observation carries the base's k planned actions, and the residual adds to all of them at once,
  as the official Diffusion Policy scripts do (False: one action per env step, as their BeT
  scripts);
* ``reward``: ``sparse`` (1 on success, else 0), ``shifted`` (the paper's r - 1: every step costs
  -1, success 0) or ``dense`` (the suite's dense reward, for training an expert);
* ``seed``: base seed of the episodes (an env runner adds its worker and vector index, so runners
  never share seeds; evaluation uses held-out seeds).

Every env's actions are rescaled to [-1, 1]^n and its ``info["success"]`` is a Python bool: the
suite's own success signal, read the same way for all.
"""
from __future__ import annotations

from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np

SUITES = ("slot", "maniskill", "adroit")
ADROIT = {"door": "AdroitHandDoor-v1", "pen": "AdroitHandPen-v1", "hammer": "AdroitHandHammer-v1",
          "relocate": "AdroitHandRelocate-v1"}
REWARDS = ("sparse", "shifted", "dense")


class EnvError(RuntimeError):
    """An env that cannot be made here (missing suite, missing Vulkan device, unknown id)."""


def _success(info: dict) -> bool:
    s = info.get("success", False)
    if hasattr(s, "item"):
        s = s.reshape(-1)[0].item() if getattr(s, "ndim", 0) else s.item()
    return bool(s)


class SuccessReward(gym.Wrapper):
    """info["success"] as a bool; the reward made sparse or shifted from it (or left dense)."""

    def __init__(self, env: gym.Env, reward: str):
        super().__init__(env)
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {REWARDS}, got {reward!r}")
        self.reward = reward

    def reset(self, **kw):
        obs, info = self.env.reset(**kw)
        return obs, {**info, "success": _success(info)}

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        ok = _success(info)
        if self.reward != "dense":
            r = float(ok) - (1.0 if self.reward == "shifted" else 0.0)
        return obs, float(r), bool(term), bool(trunc), {**info, "success": ok}


class ObsHistory(gym.ObservationWrapper):
    """The last k observations, oldest first, flattened; at reset the first one is repeated."""

    def __init__(self, env: gym.Env, k: int):
        super().__init__(env)
        self.k = k
        box = env.observation_space
        self.observation_space = gym.spaces.Box(np.tile(box.low.reshape(-1), k), np.tile(box.high.reshape(-1), k),
                                                dtype=np.float32)
        self.frames: deque = deque(maxlen=k)

    def reset(self, **kw):
        obs, info = self.env.reset(**kw)
        self.frames.clear()
        self.frames.extend([np.asarray(obs, np.float32).reshape(-1)] * self.k)
        return self.observation(None), info

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self.frames.append(np.asarray(obs, np.float32).reshape(-1))
        return self.observation(None), r, term, trunc, info

    def observation(self, _):
        return np.concatenate(self.frames).astype(np.float32)


class ChunkActions(gym.Wrapper):
    """One step is k steps of the inner env: the action (k * n,) is k actions of n, executed in
    order until the episode ends. The reward is the inner rewards' sum, minus 1 once per step when
    ``shift`` (the official chunked scripts' r - 1 on the summed sparse reward; the inner env's
    reward should then be sparse); ``info["success"]`` is whether any inner step succeeded,
    ``info["executed_steps"]`` how many inner steps m <= k ran, and ``info["executed"]`` the (k, n)
    actions with those m first (zeros after them: infos keep one shape, so a vector env can stack
    them)."""

    def __init__(self, env: gym.Env, k: int, shift: bool = False):
        super().__init__(env)
        if k < 1:
            raise ValueError(f"chunk length must be >= 1, got {k}")
        self.k, self.shift, self.n = k, shift, env.action_space.shape[0]
        box = env.action_space
        self.action_space = gym.spaces.Box(np.tile(box.low, k), np.tile(box.high, k), dtype=np.float32)

    def step(self, action):
        actions = np.asarray(action, dtype=np.float32).reshape(self.k, self.n)
        total, success, m = 0.0, False, 0
        for a in actions:
            obs, r, term, trunc, info = self.env.step(a)
            total += float(r)
            success |= bool(info.get("success", False))
            m += 1
            if term or trunc:
                break
        executed = np.zeros_like(actions)
        executed[:m] = actions[:m]
        return obs, total - (1.0 if self.shift else 0.0), term, trunc, {**info, "success": success,
                                                                          "executed": executed, "executed_steps": m}


class BaseActionObs(gym.Wrapper):
    """Runs a frozen base policy (action chunks: it plans ``pred_horizon`` actions and executes the
    first ``act_horizon`` before planning again) and appends its next action a_base(s) to the
    observation. The action given to ``step`` is executed as is (the decorated action; the inner
    env clips it to its box).

    ``chunk``: the inner env is a :class:`ChunkActions` of the base's ``act_horizon`` actions; the
    base plans at every step and its ``act_horizon`` actions, flattened, are a_base(s).

    A stochastic base (Diffusion Policy's sampling noise) draws from a generator seeded with the
    episode's seed at reset, so its j-th plan of an episode uses the same noise whatever acted
    before: the base alone and the decorated policy, evaluated on the same seeds, are paired draw
    for draw (with a zero residual they take the same actions). A reset without a seed continues
    the previous episode's generator."""

    def __init__(self, env: gym.Env, policy, chunk: bool = False):
        super().__init__(env)
        import torch

        self.torch, self.policy, self.chunk = torch, policy, chunk
        n = env.action_space.shape[0]
        if chunk and n != policy.act_horizon * policy.act_dim:
            raise ValueError(f"a chunked env's actions ({n}) must be the base's act_horizon x act_dim "
                             f"({policy.act_horizon} x {policy.act_dim})")
        box = env.observation_space
        self.observation_space = gym.spaces.Box(np.concatenate([box.low, -np.ones(n)]).astype(np.float32),
                                                np.concatenate([box.high, np.ones(n)]).astype(np.float32))
        self.queue: deque = deque()
        self.generator = torch.Generator().manual_seed(0)

    def _plan(self, obs: np.ndarray) -> np.ndarray:
        if not self.queue:
            with self.torch.no_grad():
                chunk = self.policy.act_chunk(self.torch.as_tensor(obs, dtype=self.torch.float32)[None],
                                              generator=self.generator)[0]
            chunk = chunk[: self.policy.act_horizon].numpy()
            self.queue.extend([chunk.reshape(-1)] if self.chunk else chunk)
        return np.asarray(self.queue[0], dtype=np.float32)

    def _with_base(self, obs: np.ndarray) -> np.ndarray:
        return np.concatenate([obs, self._plan(obs)]).astype(np.float32)

    def reset(self, **kw):
        obs, info = self.env.reset(**kw)
        if kw.get("seed") is not None:
            self.generator.manual_seed(int(kw["seed"]))
        self.queue.clear()
        return self._with_base(obs), info

    def step(self, action):
        self.queue.popleft()
        obs, r, term, trunc, info = self.env.step(action)
        if term or trunc:
            self.queue.clear()
        return self._with_base(obs), r, term, trunc, info


class ScaleActions(gym.ActionWrapper):
    """Actions in [-1, 1]^n mapped affinely to the env's box (and clipped)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.low, self.high = env.action_space.low.astype(np.float64), env.action_space.high.astype(np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=env.action_space.shape, dtype=np.float32)

    def action(self, a):
        a = np.clip(np.asarray(a, dtype=np.float64), -1.0, 1.0)
        return (self.low + (a + 1.0) * 0.5 * (self.high - self.low)).astype(np.float32)


def vulkan_problem() -> str | None:
    """Why ManiSkill3 cannot run here (no SAPIEN, no Vulkan device), or None when it can."""
    import importlib.util

    if importlib.util.find_spec("sapien") is None:  # the probe imports it, in its own process
        return "ManiSkill3's simulator SAPIEN is not installed (pip install 'iclr-ray[rl]')"
    from .maniskill import probe_vulkan

    return probe_vulkan()


def _raw(cfg: dict[str, Any]) -> gym.Env:
    suite, env_id = cfg.get("suite", "slot"), cfg.get("id")
    kwargs = dict(cfg.get("kwargs") or {})
    steps = cfg.get("max_episode_steps")
    if suite == "slot":
        from .slot import SlotReach

        if steps is not None:
            kwargs["max_episode_steps"] = steps
        return SlotReach(dense=cfg.get("reward") == "dense", **kwargs)
    if suite == "adroit":
        try:
            import gymnasium_robotics  # noqa: F401
        except ImportError as exc:
            raise EnvError(f"Adroit needs gymnasium-robotics ({exc})") from None
        gym.register_envs(gymnasium_robotics)
        env_id = ADROIT.get(env_id, env_id)
        return gym.make(env_id, max_episode_steps=steps, **kwargs) if steps else gym.make(env_id, **kwargs)
    if suite == "maniskill":
        from .maniskill import make_maniskill

        return make_maniskill(env_id, cfg.get("control_mode", "pd_ee_delta_pose"), steps, kwargs)
    raise EnvError(f"unknown env suite {suite!r}; known: {', '.join(SUITES)}")


def chunk_length(cfg: dict[str, Any], policy=None) -> int:
    """How many inner env steps one step of this env config's env is: the base's act_horizon with
    ``residual_chunk``, else 1."""
    if not (cfg.get("residual_chunk") and cfg.get("base")):
        return 1
    if policy is None:
        from .store import load_policy

        policy = load_policy(cfg["base"])
    return int(policy.act_horizon)


def make_env(cfg: dict[str, Any] | None = None) -> gym.Env:
    """The wrapped env of an env config (see the module docstring)."""
    cfg = dict(cfg or {})
    policy = None
    if cfg.get("base"):
        from .store import load_policy

        policy = load_policy(cfg["base"])
    k = chunk_length(cfg, policy)
    reward = cfg.get("reward", "shifted")
    env: gym.Env = ScaleActions(_raw(cfg))
    env = SuccessReward(env, "sparse" if k > 1 and reward == "shifted" else reward)
    if int(cfg.get("obs_horizon", 1)) > 1:
        env = ObsHistory(env, int(cfg["obs_horizon"]))
    if k > 1:
        env = ChunkActions(env, k, shift=reward == "shifted")
    if policy is not None:
        env = BaseActionObs(env, policy, chunk=k > 1)
    return env


def rllib_env(env_config) -> gym.Env:
    """RLlib's env creator: episodes of runner w, sub-env i start from seed + 10_000 w + 1000 i."""
    cfg = dict(env_config)
    env = make_env(cfg)
    offset = 10_000 * int(getattr(env_config, "worker_index", 0)) + 1000 * int(getattr(env_config, "vector_index", 0))
    return SeededResets(env, int(cfg.get("seed", 0)) + offset)


class SeededResets(gym.Wrapper):
    """Episode j of this env resets with seed base + j, so every episode's seed is known."""

    def __init__(self, env: gym.Env, base: int):
        super().__init__(env)
        self.base, self.episodes = base, 0

    def reset(self, *, seed=None, options=None):
        seed = self.base + self.episodes if seed is None else seed
        self.episodes += 1
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, {**info, "seed": seed}
