"""The bandit as a gymnasium environment (no Ray): one episode is one run of T pulls, its rewards
the same counter-based draws as the vectorised engine's, so run r meets the same rewards in both.

Observation (float64): [t, arm pulled at t-1 (-1 at t = 1), its reward, run index]; the runs an
environment plays are given in its config and taken in turn at each reset.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from .bandit import REWARD, rewards, run_keys, uniforms


class BanditEnv(gym.Env):
    def __init__(self, config: dict):
        self.mu = np.asarray(config["mu"], float)
        self.T, self.seed_, self.model = int(config["T"]), int(config["seed"]), config["reward_model"]
        runs = list(config["runs"])
        # with several env runners (RLlib's worker_index 1..n), runner i plays every n-th run
        n, i = int(config.get("num_env_runners", 0)), int(getattr(config, "worker_index", 0))
        self.runs = runs[i - 1::n] if n and i else runs
        self.next = 0
        self.action_space = gym.spaces.Discrete(len(self.mu))
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.run = self.runs[self.next % len(self.runs)]
        self.next += 1
        self.key, self.t = run_keys(self.seed_, [self.run]), 1
        return np.array([1.0, -1.0, 0.0, self.run]), {}

    def step(self, action):
        a = int(action)
        r = float(rewards(self.mu[[a]], self.model, uniforms(self.key, self.t, REWARD + a))[0])
        self.t += 1
        return np.array([self.t, a, r, self.run], np.float64), r, self.t > self.T, False, {}
