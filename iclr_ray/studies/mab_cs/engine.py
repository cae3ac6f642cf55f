"""The vectorised engine (no Ray, no I/O): R independent runs of one policy on one instance advance
together, one numpy step per time step for all of them.

Once every run has settled on an arm for good (PE accepted a candidate or fell back to ell, PE-CS
finished), the remaining steps are accounted in one block: their pulls and regret are the settled
arm's, whatever the rewards would have been, so the result is the same as stepping to T.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .bandit import Instance, Regret, RewardModel, Setting, reward_uniforms, rewards, run_keys
from .policies import make_policy


BLOCK = 256
"""steps whose reward uniforms are drawn at once (and between two checks for settled runs)"""


def checkpoints(T: int, points: int, marks: Sequence[int] = ()) -> np.ndarray:
    """About ``points`` log-spaced steps in 1..T, always ending at T, and the steps in ``marks``."""
    t = np.unique(np.r_[np.round(np.geomspace(1, T, max(points, 2))), marks].astype(np.int64))
    return t[(t >= 1) & (t <= T)]


@dataclass
class Trace:
    """Regret of each run at each checkpoint, and each run's pulls of each arm at T."""

    times: np.ndarray
    cost: np.ndarray
    quality: np.ndarray
    pulls: np.ndarray
    arms: np.ndarray | None = None
    """the arm every run pulled at every step (R x T), when asked for"""
    stepped: int = 0
    """steps simulated one by one (the rest were accounted in a block after every run settled)"""


def simulate(inst: Instance, policy: str, setting: Setting, alpha: float, T: int, seed: int,
             runs: Sequence[int], ell: int | None = None, reward_model: RewardModel = "bernoulli",
             kappa: int = 5, etc_factor: float = 5.0, points: int = 40, record_arms: bool = False,
             fast_forward: bool = True, marks: Sequence[int] = ()) -> Trace:
    """Runs ``runs`` (indices: run r draws the same rewards wherever it is simulated) of ``policy``
    for T steps; regret at ``points`` log-spaced checkpoints and at the steps in ``marks``."""
    keys = run_keys(seed, runs)
    R = len(keys)
    pol = make_policy(policy, inst.cost, T, keys, alpha, setting, ell, reward_model, kappa, etc_factor)
    regret = Regret(inst, setting, alpha, ell)
    mu = np.asarray(inst.mu)
    times = checkpoints(T, points, marks)
    cost, quality = np.zeros((R, len(times))), np.zeros((R, len(times)))
    seq = np.zeros((R, T), np.int16) if record_arms else None
    rows = np.arange(R)
    ci, t = 0, 1
    while t <= T:
        if fast_forward and not record_arms and pol.settled().all():
            break
        block = reward_uniforms(keys, t, min(BLOCK, T - t + 1), inst.K)
        for i in range(block.shape[1]):
            arms = pol.select(t)
            pol.update(t, arms, rewards(mu[arms], reward_model, block[rows, i, arms]))
            if seq is not None:
                seq[:, t - 1] = arms
            if t == times[ci]:
                cost[:, ci], quality[:, ci] = regret(pol.n)
                ci += 1
            t += 1
    stepped = t - 1
    if t <= T:  # every run settled: the rest of the horizon adds pulls of the settled arm
        prev = stepped
        for i in range(ci, len(times)):
            pol.n[rows, pol.last] += times[i] - prev
            prev = times[i]
            cost[:, i], quality[:, i] = regret(pol.n)
    return Trace(times, cost, quality, pol.n.copy(), seq, stepped)
