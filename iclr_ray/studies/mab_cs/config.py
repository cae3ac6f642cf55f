"""mab_cs config. Defaults are the ``small`` preset (minutes on 2 CPU cores); ``paper`` has the
official experiments' settings (T = 5e6, 25 runs, alpha 0.05..0.45, ell sweeps, the MovieLens and
Goodreads instances)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, FilePath, model_validator

from ...config import Section, StudyConfig
from .data import BUILTIN, TOY_XS

PolicyName = Literal["pe", "pe_asym", "pe_cs", "cs_ucb", "cs_ts", "cs_etc"]


class InstanceSpec(Section):
    """An instance given by its numbers (arms are sorted by cost when it is built)."""

    name: str
    mu: list[float] = Field(min_length=2)
    cost: list[float] = Field(min_length=2)


class CurveCase(Section):
    instance: str
    alpha: float = Field(ge=0, lt=1)


class Curves(Section):
    """Regret against t within one horizon, every policy (the paper's regret-vs-time figures), on
    the paper's toy family (its Fig. 3: alpha = 0.2; the cheap arm is acceptable from x = 0.76 on)."""

    cases: list[CurveCase] = [CurveCase(instance="toy_0.66", alpha=0.2), CurveCase(instance="toy_0.72", alpha=0.2),
                              CurveCase(instance="toy_0.81", alpha=0.2), CurveCase(instance="toy_0.90", alpha=0.2)]
    T: int = Field(100_000, ge=10)
    runs: int = Field(20, ge=1)
    policies: list[PolicyName] = ["pe_cs", "cs_ucb", "cs_ts", "cs_etc"]


class Horizons(Section):
    """Final regret of PE (known ell) and PE-CS at growing horizons T: logarithmic or T^(2/3)?"""

    instance: str = "synth10"
    alpha: float = Field(0.2, ge=0, lt=1)
    ell: int = Field(7, ge=0)
    """the known reference arm for PE"""
    horizons: list[int] = Field([1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000], min_length=3)
    runs: int = Field(50, ge=2)


class Gaps(Section):
    """PE's pulls of a cheaper arm that falls short of the threshold by a gap, against the gap."""

    gaps: list[float] = Field([0.02, 0.04, 0.08, 0.16, 0.32], min_length=3)
    T: int = Field(1_000_000, ge=10)
    runs: int = Field(50, ge=1)


class AlphaSweep(Section):
    """Subsidised best reward: final regret of PE-CS and the baselines against alpha."""

    instances: list[str] = ["synth10"]
    alphas: list[float] = Field([0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40, 0.45], min_length=1)
    T: int = Field(100_000, ge=10)
    runs: int = Field(20, ge=1)
    policies: list[PolicyName] = ["pe_cs", "cs_ucb", "cs_ts", "cs_etc"]


class EllSweep(Section):
    """Known reference arm: final regret of PE, asymmetric PE and CS-UCB against ell."""

    instances: list[str] = ["synth10"]
    ells: list[int] = Field([1, 3, 5, 7], min_length=1)
    alpha: float = Field(0.0, ge=0, lt=1)
    T: int = Field(100_000, ge=10)
    runs: int = Field(20, ge=1)
    policies: list[PolicyName] = ["pe", "pe_asym", "cs_ucb"]


class RealData(Section):
    """Real-format instances, added to the alpha and ell sweeps when given."""

    together = (("movielens_ratings", "movielens_movies"),)

    movielens_ratings: Optional[FilePath] = None
    """ratings.csv (userId,movieId,rating,timestamp) of a MovieLens release"""
    movielens_movies: Optional[FilePath] = None
    """movies.csv (movieId,title,genres) of the same release"""
    goodreads: Optional[str] = None
    """a CSV with genre,rating columns, or a folder of one JSON-lines review file per genre"""
    cost_seed: int = 0
    """seed of the uniform random costs (the paper: 0 for MovieLens)"""


class Config(StudyConfig):
    reward: Literal["bernoulli", "uniform"] = "bernoulli"
    """reward model: Bernoulli(mu), or uniform on [mu - w, mu + w] with w = min(mu, 1 - mu)"""
    engine: Literal["vectorised", "rllib"] = "vectorised"
    """vectorised: runs as numpy arrays in Ray tasks; rllib: RLlib env runners, one episode per
    simulation whose env steps pull an arm in all its runs (the same pulls; needs the rl extra)"""
    rllib_env_runners: int = Field(2, ge=0)
    """env runners of each RLlib Algorithm (0: the driver's own env runner)"""
    kappa: int = Field(5, ge=0)
    """PE-CS: how many rounds the best arm's may lead the candidate's"""
    etc_factor: float = Field(5.0, gt=0)
    """CS-ETC explores every arm etc_factor * ceil((T/K)^(2/3)) times (the official code's 5)"""
    runs_per_task: int = Field(50, ge=1)
    """runs one Ray task simulates together (its vectorised batch)"""
    points: int = Field(40, ge=2)
    """log-spaced checkpoints of the regret curves"""
    instances: list[InstanceSpec] = []
    """more instances by their numbers, usable by name in the experiments below"""
    curves: Curves = Curves()
    horizons: Horizons = Horizons()
    gaps: Gaps = Gaps()
    alpha_sweep: AlphaSweep = AlphaSweep()
    ell_sweep: EllSweep = EllSweep()
    real: RealData = RealData()

    @model_validator(mode="after")
    def _names(self):
        known = set(BUILTIN) | {i.name for i in self.instances}
        used = [*(c.instance for c in self.curves.cases), self.horizons.instance, *self.alpha_sweep.instances, *self.ell_sweep.instances]
        unknown = sorted({n for n in used if n not in known})
        if unknown:
            raise ValueError(f"unknown instance {', '.join(unknown)}; built in: {', '.join(BUILTIN)}"
                             " (or define it under instances:)")
        return self


PRESETS = {
    "smoke": {
        "runs_per_task": 5,
        "points": 12,
        "curves": {"cases": [{"instance": "toy_0.72", "alpha": 0.2}], "T": 3000, "runs": 5},
        "horizons": {"horizons": [300, 1000, 3000, 10000], "runs": 10},
        "gaps": {"gaps": [0.08, 0.16, 0.32], "T": 20_000, "runs": 10},
        "alpha_sweep": {"alphas": [0.1, 0.3], "T": 3000, "runs": 5},
        "ell_sweep": {"ells": [1, 7], "T": 3000, "runs": 5},
    },
    "small": {},
    "paper": {
        # The official experiments: T = 5e6, 25 runs, alpha 0.05..0.45 on the MovieLens and Goodreads
        # instances (PE-CS vs CS-ETC/UCB/TS), ell sweeps with PE, asymmetric PE and CS-UCB, and the
        # toy family at T = 5e5 with 50 runs (notes_11-19.md, section 13).
        "runs_per_task": 25,
        "points": 100,
        "curves": {"cases": [*({"instance": f"toy_{x:.2f}", "alpha": 0.2} for x in TOY_XS),
                             {"instance": "movielens_paper", "alpha": 0.05}, {"instance": "goodreads_paper", "alpha": 0.05}],
                   "T": 5_000_000, "runs": 25},
        "horizons": {"horizons": [10_000, 100_000, 1_000_000, 5_000_000], "runs": 25},
        "gaps": {"T": 5_000_000, "runs": 25},
        "alpha_sweep": {"instances": ["movielens_paper", "goodreads_paper"], "T": 5_000_000, "runs": 25},
        "ell_sweep": {"instances": ["movielens_paper", "goodreads_paper"], "ells": [1, 3, 5, 7],
                      "T": 5_000_000, "runs": 25},
    },
}
