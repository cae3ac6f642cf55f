"""Embeddings of s-sparse vectors (no Ray, no I/O): Silwal, Woodruff, Zhang, "Beyond Worst-Case
Dimensionality Reduction for Sparse Vectors" (ICLR 2025).

Vectors are rows of a ``scipy.sparse`` CSR matrix with d columns; d never appears in a dense
array, so d in the millions costs nothing. Every map hashes coordinates with the shared
counter-based hash, so a coordinate's bucket is a pure function of (seed, repetition, coordinate):
vectors can be embedded one at a time, in any order, on any machine.

* :class:`MaxPool` -- the non-linear map for non-negative vectors. t independent hashes
  h_j: [d] -> [m]; repetition j keeps, per bucket b, f_j(x)_b = max_{i: h_j(i) = b} x_i (the max
  runs over all d coordinates of x, zeros included). The output is the concatenation
  f(x) = (f_1(x), ..., f_t(x)) with m*t coordinates. The distance estimate is

      D_p(x, y) = ((1/t) sum_j ||f_j(x) - f_j(y)||_p^p)^(1/p),   D_inf(x, y) = ||f(x) - f(y)||_inf,

  a rescaled l_p norm of f(x) - f(y), the same map for every p. This is our reconstruction of the
  paper's construction from its stated bounds (its body text was not available to us); see
  docs/studies/sparse_embed.md.
* :class:`CountSketch` -- the linear map with the same shape (t repetitions, m buckets, random
  signs, sums): the baseline that shows why the non-linearity matters. With t = 1 it is the
  folklore "birthday-paradox" linear map of the paper's average-case result.
* :func:`nnls_decode` -- a compressed-sensing decoder (non-negative least squares) for Gaussian
  measurements: the non-smooth decoder that beats the s^2 barrier of linear/smooth maps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ...hashing import hash_u64, uniform_hash


def _entries(X: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, column, value) of every stored entry of a CSR matrix."""
    rows = np.repeat(np.arange(X.shape[0], dtype=np.int64), np.diff(X.indptr))
    return rows, X.indices.astype(np.int64), X.data.astype(np.float64)


@dataclass(frozen=True)
class _Hashed:
    d: int
    m: int
    t: int
    seed: int

    @property
    def dims(self) -> int:
        return self.m * self.t

    def buckets(self, cols: np.ndarray, j: int) -> np.ndarray:
        """h_j(i) in [0, m) for every coordinate i in ``cols``."""
        return (hash_u64(cols, self.seed, salt=2 * j) % np.uint64(self.m)).astype(np.int64)

    def _keys(self, X: sp.csr_matrix):
        """Per repetition j: (row, output column j*m + h_j(i), value) of every entry of X."""
        if X.shape[1] != self.d:
            raise ValueError(f"vectors have {X.shape[1]} coordinates, the map expects d = {self.d}")
        rows, cols, vals = _entries(X)
        for j in range(self.t):
            yield j, rows, j * self.m + self.buckets(cols, j), vals, cols


@dataclass(frozen=True)
class MaxPool(_Hashed):
    """f(x) = (max-pool of x over the buckets of h_j)_{j=1..t}: m*t coordinates."""

    def embed(self, X: sp.csr_matrix) -> sp.csr_matrix:
        X = sp.csr_matrix(X)
        n, width = X.shape[0], self.dims
        parts_r, parts_c, parts_v = [], [], []
        for _, rows, out, vals, _ in self._keys(X):
            parts_r.append(rows), parts_c.append(out), parts_v.append(vals)
        rows, out, vals = (np.concatenate(p) if p else np.zeros(0) for p in (parts_r, parts_c, parts_v))
        key = rows * width + out
        order = np.lexsort((vals, key))  # by bucket, then by value: the last of each bucket is its max
        key, vals = key[order], vals[order]
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else np.zeros(0, np.int64)
        count = np.diff(np.r_[first, key.size])  # support coordinates of the row in the bucket
        key, vals = key[first], vals[first + count - 1]
        if vals.size and vals.min() < 0:
            # the bucket's other coordinates, where x is 0, win over a negative maximum
            vals = np.where(count < self.bucket_sizes()[key % width], np.maximum(vals, 0.0), vals)
        f = sp.csr_matrix((vals, (key // width, key % width)), shape=(n, width))
        f.eliminate_zeros()
        return f

    def bucket_sizes(self) -> np.ndarray:
        """How many of the d coordinates each of the m*t buckets holds (only signed inputs need it)."""
        size = np.zeros(self.dims, dtype=np.int64)
        for j in range(self.t):
            for lo in range(0, self.d, 1 << 20):
                cols = np.arange(lo, min(self.d, lo + (1 << 20)), dtype=np.int64)
                size[j * self.m:(j + 1) * self.m] += np.bincount(self.buckets(cols, j), minlength=self.m)
        return size


@dataclass(frozen=True)
class CountSketch(_Hashed):
    """g_j(x)_b = sum_{i: h_j(i) = b} sigma_j(i) x_i with random signs sigma: linear, m*t coordinates."""

    def embed(self, X: sp.csr_matrix) -> sp.csr_matrix:
        X = sp.csr_matrix(X)
        parts = [(rows, out, vals * self.signs(cols, j)) for j, rows, out, vals, cols in self._keys(X)]
        rows, out, vals = (np.concatenate([p[i] for p in parts]) for i in range(3))
        g = sp.csr_matrix((vals, (rows, out)), shape=(X.shape[0], self.dims))  # duplicates are summed
        g.eliminate_zeros()
        return g

    def signs(self, cols: np.ndarray, j: int) -> np.ndarray:
        return np.where(uniform_hash(cols, self.seed, salt=2 * j + 1) < 0.5, -1.0, 1.0)


def estimate(per_rep: np.ndarray, p: float, t: int | None = None) -> np.ndarray:
    """The distance estimate from per-repetition sums: ``per_rep[..., j]`` holds
    ||f_j(x) - f_j(y)||_p^p (p finite) or ||f_j(x) - f_j(y)||_inf; the first ``t`` repetitions are used."""
    r = per_rep[..., : (t or per_rep.shape[-1])]
    if math.isinf(p):
        return r.max(axis=-1)
    return (r.mean(axis=-1)) ** (1.0 / p)


# --- dimensions ----------------------------------------------------------------------------------


def lp_dims(s: int, n: int, eps: float, c_m: float, c_t: float) -> tuple[int, int]:
    """(m, t) for l_p within 1 +- eps: m = c_m s / eps buckets, t = c_t ln(n s) / eps repetitions,
    m t = O(s log(n s) / eps^2) as in the paper's bound. c_m = 4 makes the chance that a support
    coordinate of x or y shares its bucket with another one at most (2s - 1)/m < eps/2."""
    return max(1, math.ceil(c_m * s / eps)), max(1, math.ceil(c_t * math.log(max(n * s, 2)) / eps))


def lp_dims_guaranteed(s: int, n: int, eps: float, delta: float) -> tuple[int, int]:
    """(m, t) for which our proof gives 1 - eps <= D_p / ||x - y||_p <= 1 for all pairs of n
    vectors and every p, with probability >= 1 - delta: m = 4s/eps, and t = (6/eps) ln(2 s n^2 / delta)
    from a Chernoff bound (failures of isolation at most 2x their mean eps t / 2) and a union bound
    over the <= 2s support coordinates of each of the n^2/2 pairs."""
    return math.ceil(4 * s / eps), math.ceil(6 / eps * math.log(2 * s * n * n / delta))


def isolation_failure(s: int, m: int) -> float:
    """Chance that a support coordinate of x or y shares its bucket with one of the other <= 2s - 1."""
    return 1.0 - (1.0 - 1.0 / m) ** (2 * s - 1)


def linf_reps(s: int, n: int, m: int, delta: float) -> int:
    """Repetitions t for exact l_inf on all n(n-1)/2 pairs with probability >= 1 - delta: the
    coordinate where |x - y| peaks must be isolated in some repetition, q^t <= delta / pairs,
    q = isolation_failure(s, m). With m = c s, t = O(log n): m t = O(s log n), the paper's bound."""
    pairs = max(n * (n - 1) / 2, 1.0)
    q = isolation_failure(s, m)
    return max(1, math.ceil(math.log(pairs / delta) / math.log(1.0 / q)))


def birthday_exact(s: int, m: int) -> float:
    """Chance that s distinct coordinates land in s distinct buckets of m: prod_{i<s} (1 - i/m)."""
    return float(np.prod(1.0 - np.arange(s) / m))


# --- compressed sensing ----------------------------------------------------------------------------


def gaussian_measurements(m: int, d: int, seed: int) -> np.ndarray:
    """A (m x d) with N(0, 1/m) entries, the first row all-positive (|N|): with a positive row in
    its row space, non-negative least squares recovers sufficiently sparse non-negative x exactly."""
    A = np.random.default_rng(seed).standard_normal((m, d)) / math.sqrt(m)
    A[0] = np.abs(A[0])
    return A


def nnls_decode(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x_hat = argmin_{x >= 0} ||A x - y||_2 (Lawson-Hanson active set, scipy)."""
    from scipy.optimize import nnls

    return nnls(A, y, maxiter=10 * A.shape[1])[0]
