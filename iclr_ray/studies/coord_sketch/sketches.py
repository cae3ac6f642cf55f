"""Matrix-product sketching by coordinated sampling (Daliri, Freire, Li, Musco; ICLR 2025).

Two parties hold A (n x d) and B (n x m) whose rows are indexed by keys (row ids or join keys).
Each computes a small sketch of its own matrix, independently, sharing only a random seed; the
product AᵀB is then estimated from the two sketches alone.

Coordinated sampling. A shared hash h: key -> U(0, 1) decides which rows are kept. Row i of A is
kept iff h(i) < c_A ||a_i||², for a scale c_A chosen by the party:
  - priority sampling (fixed size k): rank R_i = h(i) / ||a_i||², keep the k smallest ranks and
    set c_A = tau_A, the (k+1)-th smallest rank;
  - threshold sampling (expected size k): c_A = k / ||A||_F², i.e. p_i = min(1, k ||a_i||²/||A||_F²).
Because both parties use the same h, a row with large weight on both sides is kept by both. The
estimator
    W = sum_{i in S_A ∩ S_B} a_i b_iᵀ / min(1, c_A ||a_i||², c_B ||b_i||²)
is unbiased: min(1, ...) is exactly the probability that i lands in both samples.

Baselines at equal storage: JL (Gaussian S in R^{k x n}, W = (SA)ᵀ(SB)) and CountSketch (rows
hashed into k buckets with random signs). Both parties derive S from the shared seed and the row
keys, so they too are computed independently.

Storage is counted in stored numbers: a sampled row costs min(2 nnz, d) + 1 (values with column
indices, or the dense row, plus its key) and each sampling sketch one more number for its scale;
a linear sketch costs k x d.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

import numpy as np
import scipy.sparse as sp

from ...hashing import hash_u64, uniform_hash

Method = Literal["priority", "threshold", "jl", "countsketch"]
METHODS: tuple[str, ...] = ("priority", "threshold", "jl", "countsketch")
SAMPLING = ("priority", "threshold")

def row_norms2(A: sp.spmatrix | np.ndarray) -> np.ndarray:
    if sp.issparse(A):
        return np.asarray(A.multiply(A).sum(axis=1)).ravel()
    return np.einsum("ij,ij->i", A, A)


def row_cost(A: sp.spmatrix | np.ndarray) -> np.ndarray:
    """Stored numbers per row if kept: the cheaper of sparse (value + column) or dense, plus the key."""
    d = A.shape[1]
    nnz = np.diff(A.indptr) if sp.issparse(A) else np.count_nonzero(A, axis=1)
    return np.minimum(2 * nnz, d) + 1


@dataclass
class SamplingSketch:
    """Kept rows (with their keys, sorted) and the scale c: row i was kept iff h(i) < c ||a_i||²."""

    method: str
    keys: np.ndarray
    rows: sp.csr_matrix
    scale: float
    storage: int

    def inclusion(self) -> np.ndarray:
        """Per kept row, min(1, c ||a_i||²): its probability of being kept."""
        with np.errstate(over="ignore", invalid="ignore"):
            return np.minimum(1.0, self.scale * row_norms2(self.rows))


@dataclass
class LinearSketch:
    method: str
    SA: np.ndarray
    storage: int


Sketch = Union[SamplingSketch, LinearSketch]


def _as_csr(A: sp.spmatrix | np.ndarray) -> sp.csr_matrix:
    return A.tocsr() if sp.issparse(A) else sp.csr_matrix(A)


def _sampling_sketch(method: str, A, keys: np.ndarray, kept: np.ndarray, scale: float) -> SamplingSketch:
    kept = kept[np.argsort(keys[kept], kind="stable")]
    rows = _as_csr(A[kept])
    storage = int(row_cost(rows).sum()) + 1
    return SamplingSketch(method, np.asarray(keys[kept], dtype=np.int64), rows, float(scale), storage)


def priority_sketch(A, keys: np.ndarray, k: int, seed: int) -> SamplingSketch:
    """Keep the k rows with the smallest rank h(i)/||a_i||²; tau is the (k+1)-th smallest rank."""
    w = row_norms2(A)
    nz = np.flatnonzero(w > 0)
    if nz.size <= k:
        return _sampling_sketch("priority", A, keys, nz, np.inf)
    rank = uniform_hash(keys[nz], seed) / w[nz]
    order = np.argpartition(rank, k)[: k + 1]
    order = order[np.argsort(rank[order])]
    tau = rank[order[k]]
    return _sampling_sketch("priority", A, keys, nz[order[:k]], tau)


def threshold_sketch(A, keys: np.ndarray, k: int, seed: int) -> SamplingSketch:
    """Keep row i iff h(i) <= p_i = min(1, k ||a_i||² / ||A||_F²): k rows in expectation (at most)."""
    w = row_norms2(A)
    total = w.sum()
    if total == 0:
        return _sampling_sketch("threshold", A, keys, np.zeros(0, dtype=np.int64), np.inf)
    scale = k / total
    kept = np.flatnonzero((w > 0) & (uniform_hash(keys, seed) <= scale * w))
    return _sampling_sketch("threshold", A, keys, kept, scale)


def gaussian_hash(keys: np.ndarray, seed: int, k: int) -> np.ndarray:
    """len(keys) x k standard normals, each a function of (key, seed, column) only (Box-Muller)."""
    out = np.empty((len(keys), k))
    for j in range(k):
        u1 = uniform_hash(keys, seed, salt=2 * j + 16)
        u2 = uniform_hash(keys, seed, salt=2 * j + 17)
        out[:, j] = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
    return out


def jl_sketch(A, keys: np.ndarray, k: int, seed: int) -> LinearSketch:
    """SA with S = G / sqrt(k), G[:, i] ~ N(0, I_k) generated from key i (only non-zero rows matter)."""
    A = _as_csr(A)
    nz = np.flatnonzero(np.diff(A.indptr))
    G = gaussian_hash(keys[nz], seed, k) / np.sqrt(k)
    SA = np.asarray((A[nz].T @ G).T)
    return LinearSketch("jl", SA, SA.size)


def countsketch(A, keys: np.ndarray, k: int, seed: int) -> LinearSketch:
    """Row i goes to bucket b(i) with sign s(i); SA[b] = sum_{b(i)=b} s(i) a_i."""
    A = _as_csr(A)
    n = A.shape[0]
    bucket = (hash_u64(keys, seed, salt=1) % np.uint64(k)).astype(np.int64)
    sign = np.where(uniform_hash(keys, seed, salt=2) < 0.5, -1.0, 1.0)
    C = sp.csr_matrix((sign, (bucket, np.arange(n))), shape=(k, n))
    SA = np.asarray((C @ A).todense())
    return LinearSketch("countsketch", SA, SA.size)


def sampling_size(A, budget: int) -> int:
    """Rows a sampling sketch of A may keep for about ``budget`` stored numbers: k rows at the mean
    cost of A's non-zero rows, plus the scale. The realised storage varies with the rows drawn, so
    comparisons with linear sketches are made at the storage actually used (run.advantage)."""
    cost = row_cost(A)
    nz = cost > 1
    per_row = float(cost[nz].mean()) if nz.any() else 1.0
    return max(1, int((budget - 1) // per_row))


def size_for(method: str, A, rows: int) -> int:
    """The size parameter k of ``method`` for a budget of ``rows`` JL-equivalent rows: linear
    sketches keep ``rows`` rows; sampling sketches as many rows as fit in rows x width numbers."""
    return sampling_size(A, rows * A.shape[1]) if method in SAMPLING else rows


def full_size(method: str, A) -> int:
    """The smallest size parameter at which a sampling sketch keeps every non-zero row of A with
    probability 1: the number of non-zero rows for priority sampling, ||A||_F² / min ||a_i||²
    (rounded up) for threshold sampling."""
    w = row_norms2(A)
    w = w[w > 0]
    if method == "priority" or not w.size:
        return max(1, int(w.size))
    return int(np.ceil(w.sum() / w.min()))


def sketch(method: str, A, keys: np.ndarray, k: int, seed: int) -> Sketch:
    """One party's sketch of A with size parameter k. Needs nothing from the other party."""
    keys = np.asarray(keys, dtype=np.int64)
    if len(keys) != A.shape[0]:
        raise ValueError(f"{len(keys)} keys for {A.shape[0]} rows")
    build = {"priority": priority_sketch, "threshold": threshold_sketch, "jl": jl_sketch,
             "countsketch": countsketch}
    if method not in build:
        raise ValueError(f"unknown sketch method {method!r}; known: {', '.join(METHODS)}")
    return build[method](A, keys, k, seed)


def estimate(sa: Sketch, sb: Sketch) -> np.ndarray:
    """W ≈ AᵀB from the two sketches alone (dense d x m)."""
    if sa.method != sb.method:
        raise ValueError(f"sketches of different kinds: {sa.method} and {sb.method}")
    if isinstance(sa, LinearSketch):
        return sa.SA.T @ sb.SA
    _, ia, ib = np.intersect1d(sa.keys, sb.keys, assume_unique=True, return_indices=True)
    d, m = sa.rows.shape[1], sb.rows.shape[1]
    if ia.size == 0:
        return np.zeros((d, m))
    p = np.minimum(sa.inclusion()[ia], sb.inclusion()[ib])
    Ai = sp.diags(1.0 / p) @ sa.rows[ia]
    return np.asarray((Ai.T @ sb.rows[ib]).todense())


def relative_error(W: np.ndarray, exact: np.ndarray, fro_a: float, fro_b: float) -> float:
    """||W - AᵀB||_F / (||A||_F ||B||_F), the paper's error measure."""
    return float(np.linalg.norm(W - exact) / (fro_a * fro_b))


def second_moment_bound(k: int) -> float:
    """The paper's bound on the mean squared relative error with k samples per party:
    E||W - AᵀB||_F² <= 2 ||A||_F² ||B||_F² / (k - 1) (Markov's inequality on it gives the
    high-probability form: k = 2/(delta eps²) + 1 samples, error <= eps w.p. 1 - delta).
    Infinite for k < 2, where it says nothing."""
    return 2.0 / (k - 1) if k >= 2 else float("inf")
