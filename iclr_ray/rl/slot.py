"""A small, fast continuous-control task with a sparse success signal and bimodal demonstrations,
for tests and the small presets of the residual-RL studies: a point mass must pass through one of
two narrow slots in a wall and stop on the goal behind them (a 2-D stand-in for peg insertion).
Pure numpy, no Ray, no I/O.

Geometry: the wall is the line x = 0 with two slots of half-width ``slot_half_width`` centred at
y = s -/+ ``gap`` / 2, s ~ U[-0.4, 0.4]; the goal is (``goal_x``, s), behind the wall between
them. The point starts at x ~ U[-1, -0.6], y ~ U[-1, 1]. An action a in [-1, 1]^2 moves it by
``step_size`` * a; a move that would cross the wall outside a slot stops at the wall in x and
keeps its move in y (the point slides along the wall, as a peg pushed against a board slides on
it), so pushing straight at the wall between the slots is stuck there. Success: within
``goal_radius`` of the goal, which ends the episode (terminated); otherwise it is truncated after
``max_episode_steps``. Observation: (x, y, s). Reward: 1 on success, else 0 (``dense=True``
subtracts the distance to the planner's next waypoint, for training an expert with RL).

The planner (:func:`scripted_expert`, the analogue of ManiSkill's motion-planning solutions)
picks a slot at reset, the upper one with probability sigmoid((y0 - s) / ``choice_temperature``),
heads for its mouth and then to the goal. Its choice is not in the observation, so near y0 = s
the demonstrations are bimodal: a regression (MLP) policy averages the two modes there, aims
between the slots and is stuck against the wall, while a small sideways push, kept up for a few
steps, slides it into a slot. That is the kind of failure a bounded residual can repair: with the
MLP base of the ``small`` preset (20 noisy demos) at ~0.31 success, a hand-written push towards
the nearer slot at alpha 0.3 reaches ~0.79 (200 held-out seeds; alpha 0.1: ~0.36).
"""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class SlotReach(gym.Env):
    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, slot_half_width: float = 0.06, gap: float = 0.6, goal_x: float = 0.3, goal_radius: float = 0.05,
                 step_size: float = 0.06, max_episode_steps: int = 60, choice_temperature: float = 0.25,
                 dense: bool = False, render_mode: str | None = "rgb_array"):
        self.w, self.gap, self.goal_x, self.radius, self.step_size = slot_half_width, gap, goal_x, goal_radius, step_size
        self.max_episode_steps, self.tau, self.dense, self.render_mode = max_episode_steps, choice_temperature, dense, render_mode
        self.observation_space = gym.spaces.Box(-2.0, 2.0, shape=(3,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.pos = np.zeros(2)
        self.s = 0.0
        self.choice = 1
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.pos[0], self.pos[1], self.s], dtype=np.float32)

    def slots(self) -> tuple[float, float]:
        return self.s - self.gap / 2, self.s + self.gap / 2

    def goal(self) -> np.ndarray:
        return np.array([self.goal_x, self.s])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        r = self.np_random
        self.s = float(r.uniform(-0.4, 0.4))
        self.pos = np.array([r.uniform(-1.0, -0.6), r.uniform(-1.0, 1.0)])
        p_upper = 1.0 / (1.0 + np.exp(-(self.pos[1] - self.s) / self.tau))
        self.choice = 1 if r.uniform() < p_upper else 0
        self.t = 0
        return self._obs(), {"success": False}

    def _move(self, a: np.ndarray) -> None:
        new = np.clip(self.pos + self.step_size * a, -2.0, 2.0)
        x0, x1 = self.pos[0], new[0]
        if (x0 < 0.0) != (x1 < 0.0) and x1 != x0:  # crossing the wall: where does the path meet x = 0?
            frac = (0.0 - x0) / (x1 - x0)
            y_cross = self.pos[1] + frac * (new[1] - self.pos[1])
            if all(abs(y_cross - c) > self.w for c in self.slots()):  # hit the wall: slide along it
                new = np.array([-1e-6 if x0 < 0 else 1e-6, new[1]])
        self.pos = new

    def step(self, action):
        a = np.clip(np.asarray(action, dtype=np.float64).reshape(2), -1.0, 1.0)
        self._move(a)
        self.t += 1
        success = float(np.linalg.norm(self.pos - self.goal())) < self.radius
        reward = float(success)
        if self.dense:
            reward -= float(np.linalg.norm(self.pos - self.waypoint())) + (0.3 if self.pos[0] < 0 else 0.0)
        truncated = not success and self.t >= self.max_episode_steps
        return self._obs(), reward, success, truncated, {"success": success}

    def waypoint(self, pos: np.ndarray | None = None, s: float | None = None) -> np.ndarray:
        """Where the planner heads from ``pos`` (default: the current position) with slot centre
        offset ``s``: its slot's mouth while left of the wall (until aligned with it close to the
        wall), then the goal."""
        pos = self.pos if pos is None else pos
        s = self.s if s is None else s
        c = s + (self.gap / 2 if self.choice else -self.gap / 2)
        if pos[0] < 0.0 and (abs(pos[1] - c) > 0.5 * self.w or pos[0] < -0.05):
            return np.array([-0.02, c])
        return np.array([self.goal_x, s])

    def render(self):
        """A 64 x 64 RGB frame: wall grey, slots and goal green, the point red."""
        img = np.full((64, 64, 3), 255, dtype=np.uint8)

        def px(x, y):
            return int(np.clip((y + 1.2) / 2.4 * 63, 0, 63)), int(np.clip((x + 1.2) / 2.4 * 63, 0, 63))

        col = px(0.0, 0.0)[1]
        img[:, col] = (120, 120, 120)
        for c in self.slots():
            lo, hi = px(0.0, c - self.w)[0], px(0.0, c + self.w)[0]
            img[lo:hi + 1, col] = (255, 255, 255)
        gr, gc = px(*self.goal())
        img[max(gr - 1, 0):gr + 2, max(gc - 1, 0):gc + 2] = (0, 180, 0)
        r, c = px(*self.pos)
        img[max(r - 1, 0):r + 2, max(c - 1, 0):c + 2] = (220, 0, 0)
        return img


def scripted_expert(obs: np.ndarray, env: SlotReach | None = None) -> np.ndarray:
    """The planner's action from an observation (x, y, s): full speed towards the waypoint of the
    slot ``env`` chose at reset (a fresh env's choice, the upper slot, without one)."""
    e = env if env is not None else SlotReach()
    x, y, s = (float(v) for v in np.asarray(obs).reshape(3))
    pos = np.array([x, y])
    return np.clip((e.waypoint(pos, s) - pos) / e.step_size, -1.0, 1.0).astype(np.float32)


def make(config: dict[str, Any] | None = None) -> SlotReach:
    return SlotReach(**(config or {}))
