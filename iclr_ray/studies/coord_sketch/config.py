"""coord_sketch config. Defaults are the ``small`` preset (the CPU-scale check of the paper notes:
n = 1e5 rows, d = m = 1000, 10 non-zeros per row, 30% shared keys, heavy-tailed row norms; the
attention products of a real pretrained LM, SmolLM2-135M-Instruct, on real review text)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, FilePath

from ...config import Section, StudyConfig

MethodName = Literal["priority", "threshold", "jl", "countsketch"]


class SparseCase(Section):
    """Sparse rows with heavy-tailed norms: where the paper says sampling wins."""

    n: int = Field(100_000, ge=2)
    """keys (rows) in the universe; each party holds non-zero rows for part of them"""
    d: int = Field(1000, ge=1)
    """columns of A"""
    m: int = Field(1000, ge=1)
    """columns of B"""
    nnz: int = Field(10, ge=1)
    """non-zeros per non-zero row (s in the paper)"""
    overlap: float = Field(0.3, ge=0.0, le=1.0)
    """fraction of keys with non-zero rows in both A and B"""
    tail: Optional[float] = Field(1.5, gt=0.0)
    """Pareto index of the row norms (smaller is heavier); null for equal norms"""


class DenseCase(Section):
    """The negative control: dense Gaussian rows, equal norms, every key on both sides."""

    n: int = Field(5000, ge=2)
    d: int = Field(100, ge=1)
    m: int = Field(100, ge=1)


class UnbiasedCase(Section):
    """A small sparse instance averaged over many seeds: does the mean estimate converge to AᵀB?"""

    n: int = Field(5000, ge=2)
    d: int = Field(20, ge=1)
    m: int = Field(20, ge=1)
    nnz: int = Field(5, ge=1)
    tail: Optional[float] = Field(1.5, gt=0.0)
    seeds: int = Field(200, ge=2)
    sketch_rows: int = Field(8, ge=1)


class AttentionCase(Section):
    """Attention products over the sequence axis: QᵀK and softmax(QKᵀ/sqrt(d))·V.

    With ``model`` set (the ``small`` and ``paper`` presets), Q, K and V are a real pretrained LM's
    (RoPE applied as the model applies it) on real review text, for the query heads ``heads`` of
    the layers ``layers``. With ``model: null`` (the ``smoke`` preset) they are a synthetic
    stand-in: Gaussian/ReLU tokens with Pareto norms and a Pareto key salience."""

    model: Optional[str] = "smollm2-135m-instruct"
    """a packaged model's name (llm.pretrained.PACKAGED), a checkpoint folder or an HF id; null:
    the synthetic stand-in"""
    seq_len: int = Field(1024, ge=2)
    """tokens in the sequence (real: the first seq_len tokens of the reviews joined)"""
    layers: list[int] = Field([3, 15, 27], min_length=1)
    """real model: decoder layers whose attention is sketched (fixed before any run: early,
    middle and late layers of SmolLM2's 30)"""
    heads: list[int] = Field([0], min_length=1)
    """real model: query heads of each layer (GQA: each reads its group's key/value head)"""
    d_head: int = Field(64, ge=1)
    """synthetic only: head dimension (a real model's is its own)"""
    tail: float = Field(3.0, gt=0.0)
    """synthetic only: Pareto index of token norms and key salience (3: the top 50 of 2048 keys
    hold about half of the attention mass; 1.5 makes one sink key hold almost all of it)"""
    top_k: Optional[int] = Field(32, ge=1)
    """a third product, sparse attention: each query keeps its top_k weights (null: none)"""


class RegressionCase(Section):
    """Linear regression across two tables joined by key (features on one party, target on the other)."""

    together = (("features_csv", "target_csv"),)

    n_keys: int = Field(50_000, ge=10)
    features: int = Field(8, ge=1)
    coverage_x: float = Field(0.5, gt=0.0, le=1.0)
    """fraction of keys in the feature table"""
    coverage_y: float = Field(0.2, gt=0.0, le=1.0)
    """fraction of keys in the target table"""
    noise: float = Field(0.5, ge=0.0)
    ridge: float = Field(1e-6, ge=0.0)
    """ridge added to the sketched normal equations, relative to tr(XᵀX)/p"""
    features_csv: Optional[FilePath] = None
    """real data: CSV with the key column and numeric feature columns (replaces the synthetic tables)"""
    target_csv: Optional[FilePath] = None
    """real data: CSV with the key column and the target column"""
    key: str = "key"
    target: str = "y"
    feature_columns: Optional[list[str]] = None
    """feature columns to use (default: every column of features_csv but the key)"""


class Config(StudyConfig):
    methods: list[MethodName] = ["priority", "threshold", "jl", "countsketch"]
    """sketches to compare"""
    sketch_rows: list[int] = Field([4, 8, 16, 32, 64], min_length=1)
    """storage budgets: each party stores as many numbers as a JL/CountSketch sketch with this many
    rows of its matrix (k x d for A, k x m for B); sampling sketches get the same numbers"""
    seeds: int = Field(20, ge=1)
    """independent shared seeds per budget"""
    sparse: SparseCase = SparseCase()
    dense: DenseCase = DenseCase()
    unbiased: UnbiasedCase = UnbiasedCase()
    attention: AttentionCase = AttentionCase()
    regression: RegressionCase = RegressionCase()


PRESETS = {
    "smoke": {
        "sketch_rows": [2, 4, 8],
        "seeds": 3,
        "sparse": {"n": 4000, "d": 200, "m": 200, "nnz": 5},
        "dense": {"n": 1000, "d": 40, "m": 40},
        "unbiased": {"n": 1000, "d": 10, "m": 10, "seeds": 40},
        # the synthetic stand-in: loading and running the real LM does not fit the smoke's minute
        "attention": {"model": None, "seq_len": 256, "d_head": 32, "top_k": 8},
        "regression": {"n_keys": 5000, "features": 4},
    },
    "small": {},
    "paper": {
        # The paper's data sets for this product are not public in the notes (unverified); this
        # scales the synthetic check up tenfold in n and doubles the width, with 50 seeds.
        "sketch_rows": [8, 16, 32, 64, 128, 256],
        "seeds": 50,
        "sparse": {"n": 1_000_000, "d": 2000, "m": 2000, "nnz": 10},
        "dense": {"n": 20_000, "d": 200, "m": 200},
        "unbiased": {"seeds": 1000},
        # every query head of ten layers of the same model, over 4096 tokens
        "attention": {"seq_len": 4096, "layers": [0, 3, 6, 9, 12, 15, 18, 21, 24, 27],
                      "heads": [0, 1, 2, 3, 4, 5, 6, 7, 8]},
        "regression": {"n_keys": 1_000_000, "features": 16},
    },
}
