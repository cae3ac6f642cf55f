"""sparse_embed config. Defaults are the ``small`` preset: the word counts of 300 real reviews
(d = 14,145, up to 75 words each), l_p sweeps at eps = 0.4, 0.2, 0.1 for p = 1, 2, 3, 8, 16 and inf
over 5 seeds of the map, exact l_inf on 32..512 generated 16-sparse vectors over 12 seeds, the
birthday-paradox map and compressed sensing for s = 4..32."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, FilePath, model_validator

from ...config import Section, StudyConfig


class Vectors(Section):
    """The data set of the l_p, signed and downstream experiments (a named file replaces ``source``)."""

    source: Literal["reviews", "generated"] = "reviews"
    """reviews: word counts of the first n reviews of the offline review corpus (iclr_ray.corpora),
    over its whole vocabulary; generated: n s-sparse vectors in d dimensions (data.random_sparse)"""
    n: int = Field(300, ge=4)
    """vectors in X (|X|); all n(n-1)/2 pairs are checked"""
    d: int = Field(1 << 20, ge=2)
    """dimension of generated vectors (this source, the exact l_inf sweep and the birthday map);
    only the non-zeros are stored"""
    s: int = Field(16, ge=1)
    """non-zeros per generated vector"""
    clusters: int = Field(8, ge=0)
    """clusters in the generated data (0: independent random supports); k of the k-center task"""
    docword: Optional[FilePath] = None
    """real data instead: a UCI bag-of-words docword.*.txt file (the first n documents)"""
    npz: Optional[FilePath] = None
    """real data instead: a scipy.sparse .npz matrix, one vector per row (the first n rows)"""

    @model_validator(mode="after")
    def _one_source(self):
        if self.docword is not None and self.npz is not None:
            raise ValueError("give at most one of docword and npz")
        if self.s > self.d:
            raise ValueError(f"s = {self.s} non-zeros do not fit in d = {self.d}")
        return self


class Lp(Section):
    """Max-pooling embedding into m = c_m s/eps buckets x t = c_t ln(|X| s)/eps repetitions."""

    eps: list[float] = Field([0.4, 0.2, 0.1], min_length=2)
    ps: list[float] = Field([1.0, 2.0, 3.0, 8.0, 16.0], min_length=1)
    """finite p of the l_p distances checked (l_inf is always checked too); large p is where a
    linear map's collisions show (a sum of two colliding coordinates exceeds both)"""
    c_m: float = Field(4.0, gt=0)
    """buckets m = c_m s / eps (4: a support coordinate collides with probability < eps/2)"""
    c_t: float = Field(1.0, gt=0)
    """repetitions t = c_t ln(|X| s) / eps (the paper's bound fixes only the order; see the docs)"""
    seeds: int = Field(5, ge=2)
    """independent maps (hash seeds) per (map, eps): the unit of the l_p claims' intervals"""
    linear_baseline: bool = True
    """also run the linear map of the same shape (CountSketch: signs and sums)"""

    @model_validator(mode="after")
    def _ranges(self):
        if any(not 0 < e < 1 for e in self.eps):
            raise ValueError(f"eps values must lie in (0, 1), got {self.eps}")
        if any(p < 1 for p in self.ps):
            raise ValueError(f"p must be >= 1, got {self.ps}")
        return self


class Linf(Section):
    """Exact l_inf: m = m_factor s buckets, repetitions from the union bound over all pairs."""

    sizes: list[int] = Field([32, 128, 512], min_length=2)
    """|X| values: the first |X| of generated vectors with independent random supports in vectors.d"""
    s: int = Field(16, ge=1)
    """non-zeros per vector"""
    m_factor: float = Field(4.0, gt=0)
    delta: float = Field(0.1, gt=0, lt=1)
    """failure probability of the union bound that sets t"""
    seeds: int = Field(12, ge=2)
    """independent maps per |X| (the same seeds at every |X|): with 3 sizes, 36 runs, enough for a
    95% interval on the share of exact runs to clear 1 - delta when every run is exact"""
    extra_reps: int = Field(4, ge=0)
    """repetitions drawn beyond the predicted t (to find the smallest t that is exact)"""

    @model_validator(mode="after")
    def _sizes(self):
        if min(self.sizes) < 2:
            raise ValueError(f"sizes must be >= 2, got {self.sizes}")
        return self


class Birthday(Section):
    """Linear map: one hash into m buckets with signs; exact norms iff no collision."""

    s_values: list[int] = Field([4, 8, 16, 32], min_length=2)
    ratios: list[float] = Field([0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 35, 50, 75, 100, 200], min_length=3)
    """m / s^2 values"""
    vectors: int = Field(2000, ge=10)


class CompressedSensing(Section):
    """Gaussian measurements A x (m rows) decoded by non-negative least squares."""

    s_values: list[int] = Field([4, 8, 16, 32], min_length=2)
    d: int = Field(2048, ge=2)
    """input dimension (A is dense: m x d)"""
    m_min: int = Field(16, ge=1)
    m_max: int = Field(1024, ge=2)
    """m grows by a factor sqrt(2) from m_min until 99% of the vectors are recovered or m_max"""
    vectors: int = Field(50, ge=5)
    tolerance: float = Field(1e-6, gt=0)
    """recovered when max |x_hat - x| <= tolerance * max |x|"""


class Config(StudyConfig):
    vectors: Vectors = Vectors()
    lp: Lp = Lp()
    linf: Linf = Linf()
    birthday: Birthday = Birthday()
    cs: CompressedSensing = CompressedSensing()
    pairs_per_task: int = Field(10_000, ge=100)
    """pairwise-distance checks are split into Ray tasks of this many pairs"""


PRESETS = {
    "smoke": {
        "vectors": {"n": 60, "d": 100_000, "s": 8, "clusters": 4},
        "lp": {"eps": [0.4, 0.2], "seeds": 2},
        "linf": {"sizes": [16, 64], "s": 8, "seeds": 3},
        "birthday": {"s_values": [4, 8], "vectors": 500},
        "cs": {"s_values": [4, 8], "d": 512, "vectors": 20, "m_max": 256},
        "pairs_per_task": 1000,
    },
    "small": {},
    "paper": {
        # The paper's experiments are not in our notes; this is the same check at cluster scale:
        # 2,000 reviews (2e6 pairs), eps down to 0.05, |X| to 8192 vectors of sparsity 32 in d = 2^24.
        "vectors": {"n": 2000, "d": 1 << 24, "s": 32, "clusters": 16},
        "lp": {"eps": [0.4, 0.2, 0.1, 0.05], "seeds": 10},
        "linf": {"sizes": [32, 128, 512, 2048, 8192], "s": 32, "seeds": 12},
        "birthday": {"s_values": [4, 8, 16, 32, 64, 128], "vectors": 20_000},
        "cs": {"s_values": [4, 8, 16, 32, 64, 128], "d": 16_384, "vectors": 200, "m_max": 8192},
        "pairs_per_task": 200_000,
    },
}
