"""The bandit as a gymnasium environment (no Ray) for ``rl.online``: one env step pulls one arm in
every run of a batch, one episode is one *item* (R runs of one policy on one instance for T
steps), with the same counter-based rewards as the vectorised engine, so run r meets the same
rewards in both.

Config: ``items`` (each ``{"mu", "T", "runs"}``), ``seed``, ``reward_model``. Observation (float64,
(R_max + 1) x 2): row 0 (t, item), row 1 + r (the arm run r pulled at t - 1, its reward; arm -1
before the first pull and on the rows an item with fewer runs leaves unused). Action: one arm per
row (MultiDiscrete). The env plays its items in turn at each reset; with several env runners
(RLlib's worker_index 1..n), runner i plays every n-th item.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from .bandit import REWARD, rewards, run_keys, uniforms


class BanditEnv(gym.Env):
    def __init__(self, config: dict):
        items = list(config["items"])
        self.seed_, self.model = int(config["seed"]), config["reward_model"]
        self.R = max(len(it["runs"]) for it in items)
        K = max(len(it["mu"]) for it in items)
        n, i = int(config.get("num_env_runners", 0)), int(getattr(config, "worker_index", 0))
        self.items = [(j, it) for j, it in enumerate(items)]
        if n and i:
            self.items = self.items[i - 1::n]
        self.next = 0
        self.action_space = gym.spaces.MultiDiscrete([K] * self.R)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (self.R + 1, 2), np.float64)

    def _obs(self) -> np.ndarray:
        return self.obs.copy()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.item, it = self.items[self.next % len(self.items)]
        self.next += 1
        self.mu, self.T = np.asarray(it["mu"], float), int(it["T"])
        self.keys = run_keys(self.seed_, it["runs"])
        self.t = 1
        self.obs = np.zeros((self.R + 1, 2))
        self.obs[0] = (1, self.item)
        self.obs[1:, 0] = -1
        return self._obs(), {}

    def step(self, action):
        arms = np.asarray(action, np.int64)[:len(self.keys)]
        r = rewards(self.mu[arms], self.model, uniforms(self.keys, self.t, REWARD + arms))
        self.t += 1
        self.obs[0, 0] = self.t
        self.obs[1:len(arms) + 1, 0], self.obs[1:len(arms) + 1, 1] = arms, r
        return self._obs(), float(r.sum()), self.t > self.T, False, {}
