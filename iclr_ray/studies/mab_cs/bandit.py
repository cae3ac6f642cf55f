"""The bandit with cost subsidy (no Ray, no I/O): instances, the two targets, the reward draws and
the regret accounting of Juneja, Joe-Wong and Yağan (ICLR 2025), in their notation.

K arms with known costs c_1 <= ... <= c_K (arms are kept sorted by cost, so "cheaper" means "lower
index") and unknown means mu_i. With subsidy factor alpha the acceptable arms are those with
mu_i >= (1 - alpha) mu_ref, where mu_ref is the mean of a known reference arm ell ("known reference
arm" setting) or the best mean mu* ("subsidised best reward", the MAB-CS problem of Sinha et al.).
The target a* is the cheapest acceptable arm. Pulling a_t costs

    cost regret     sum_t max(c_{a_t} - c_{a*}, 0)
    quality regret  sum_t max((1 - alpha) mu_ref - mu_{a_t}, 0)

(pseudo-regret: true means, clipped at 0 every step).

Randomness is counter-based: the reward of arm k at step t of run r is a function of (seed, r, t,
k) alone, the same "one reward sequence per arm in time" as a K x T table drawn up front, but
without the table. So a run draws the same rewards and the same policy coin flips whether it is
simulated alone (the RLlib engine, one run per environment) or beside thousands of others (the
vectorised engine), and whatever the chunking of runs over Ray tasks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from ...hashing import GOLDEN, mix64, to_unit

Setting = Literal["known_ref", "subsidy"]
RewardModel = Literal["bernoulli", "uniform"]

# streams of the counter-based generator: rewards use REWARD + arm, Thompson samples THETA + arm
REWARD, TIE, BINARISE, THETA = 0, 1, 2, 1 << 20

def run_keys(seed: int, runs: Sequence[int] | np.ndarray) -> np.ndarray:
    """One 64-bit key per run, from the experiment seed and the run's index."""
    with np.errstate(over="ignore"):
        return mix64(mix64(np.asarray(seed, dtype=np.uint64) * GOLDEN + np.uint64(1)) ^ np.asarray(runs, dtype=np.uint64))


def uniforms(keys: np.ndarray, t: int, stream: int | np.ndarray) -> np.ndarray:
    """U[0, 1) numbers, one per (run, stream): a pure function of (key, t, stream). ``stream``
    broadcasts against ``keys`` (shape (R,) for one per run, (R, K) for one per run and arm)."""
    with np.errstate(over="ignore"):
        counter = mix64(np.uint64(t) * GOLDEN + np.asarray(stream, dtype=np.uint64))
        x = mix64(np.asarray(keys, dtype=np.uint64).reshape(np.shape(keys) + (1,) * (np.ndim(stream) - 1)) ^ counter)
    return to_unit(x)


@dataclass(frozen=True)
class Instance:
    """A bandit instance: arm means and costs, sorted by cost (the constructor sorts them)."""

    name: str
    mu: tuple[float, ...]
    cost: tuple[float, ...]
    labels: tuple[str, ...] = ()
    """what each arm is (a genre, ...), in the sorted order; empty for synthetic arms"""

    @classmethod
    def make(cls, name: str, mu: Sequence[float], cost: Sequence[float], labels: Sequence[str] = ()) -> "Instance":
        mu, cost = np.asarray(mu, float), np.asarray(cost, float)
        if mu.ndim != 1 or mu.shape != cost.shape or len(mu) < 2:
            raise ValueError(f"instance {name}: need at least two arms with one mean and one cost each "
                             f"(got {mu.size} means, {cost.size} costs)")
        if not (np.all((mu >= 0) & (mu <= 1)) and np.all(np.isfinite(cost))):
            raise ValueError(f"instance {name}: means must lie in [0, 1] and costs be finite")
        if labels and len(labels) != len(mu):
            raise ValueError(f"instance {name}: {len(labels)} labels for {len(mu)} arms")
        order = np.argsort(cost, kind="stable")
        return cls(name, tuple(mu[order].tolist()), tuple(cost[order].tolist()),
                   tuple(labels[i] for i in order) if labels else ())

    @property
    def K(self) -> int:
        return len(self.mu)

    def mu_ref(self, setting: Setting, ell: int | None) -> float:
        return self.mu[ell] if setting == "known_ref" else max(self.mu)

    def target(self, setting: Setting, alpha: float, ell: int | None = None) -> int:
        """a*: the cheapest arm whose mean is at least (1 - alpha) mu_ref."""
        threshold = (1 - alpha) * self.mu_ref(setting, ell)
        return int(np.flatnonzero(np.asarray(self.mu) >= threshold - 1e-12)[0])


class Regret:
    """Cost and quality regret as functions of the pulls so far: pseudo-regret adds a fixed amount
    per pull of each arm, so the counts n (R x K) decide it."""

    def __init__(self, inst: Instance, setting: Setting, alpha: float, ell: int | None):
        mu, c = np.asarray(inst.mu), np.asarray(inst.cost)
        a_star = inst.target(setting, alpha, ell)
        self.step_cost = np.maximum(c - c[a_star], 0.0)
        self.step_quality = np.maximum((1 - alpha) * inst.mu_ref(setting, ell) - mu, 0.0)

    def __call__(self, pulls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(cost regret, quality regret) of each run with pull counts ``pulls``."""
        return pulls @ self.step_cost, pulls @ self.step_quality


def reward_uniforms(keys: np.ndarray, t0: int, steps: int, K: int) -> np.ndarray:
    """The reward uniforms of every arm at steps t0 .. t0 + steps - 1, shape (R, steps, K): entry
    (r, i, k) equals ``uniforms(keys[r], t0 + i, REWARD + k)``, drawn for a block at once."""
    t = np.arange(t0, t0 + steps, dtype=np.uint64)[:, None]
    stream = (REWARD + np.arange(K)).astype(np.uint64)[None, :]
    with np.errstate(over="ignore"):
        x = mix64(np.asarray(keys, dtype=np.uint64)[:, None, None] ^ mix64(t * GOLDEN + stream)[None])
    return to_unit(x)


def rewards(mu: np.ndarray, model: RewardModel, u: np.ndarray) -> np.ndarray:
    """Rewards in [0, 1] with mean ``mu`` (of the pulled arms) from their uniforms ``u``.

    ``bernoulli``: 1{u < mu}; ``uniform``: a general bounded reward, uniform on
    [mu - w, mu + w] with w = min(mu, 1 - mu), from the same u."""
    if model == "bernoulli":
        return (u < mu).astype(np.float64)
    width = np.minimum(mu, 1.0 - mu)
    return mu + width * (2.0 * u - 1.0)
