"""Exact pairwise l_p distances between sparse vectors, and the downstream tasks on a distance
matrix (no Ray, no I/O).

Distances visit the non-zeros of each pair's two vectors once (the other vector's value read from a
dense block of the used columns), so the cost is O(nnz(x) + nnz(y)) per pair whatever d is, and the
same code serves the inputs (d in the millions) and their embeddings. Coordinates can be grouped
(a repetition of an embedding is a group of m columns), giving per-group sums ||x_g - y_g||_p^p or
maxima, from which the estimate for any prefix of repetitions follows.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated index ranges [starts[k], starts[k] + lengths[k]) and the k of each index."""
    owner = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
    offset = np.arange(owner.size, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(starts, lengths) + offset, owner


def _power(x: np.ndarray, p: float) -> np.ndarray:
    """x^p for x >= 0; integer p by repeated squaring (far cheaper than pow, the same to rounding)."""
    if p == 1:
        return x
    if float(p).is_integer() and 2 <= p <= 64:
        k, out, base = int(p), None, x
        while k:
            if k & 1:
                out = base if out is None else out * base
            k >>= 1
            if k:
                base = base * base
        return out
    return x**p


def pair_distances(X: sp.csr_matrix, ia: np.ndarray, ib: np.ndarray, ps: tuple[float, ...],
                   group_size: int | None = None, cells: int = 1 << 22) -> dict[float, np.ndarray]:
    """For pairs (X[ia[k]], X[ib[k]]): {p: array (pairs, groups)} of sum_{i in group} |x_i - y_i|^p
    (p finite) or max_{i in group} |x_i - y_i| (p = inf). Columns c belong to group c // group_size
    (one group of all columns when ``group_size`` is None).

    Only the columns some vector uses are visited, a block of them at a time (``cells`` dense
    entries, 32 MiB): the block's rows are laid out densely, and each pair reads the other row's
    value at every column of the first row's support (|x_i - y_i|, shared columns included), then at
    every column of the second row's support where the first row is 0 (|y_i|). Every non-zero of
    either vector is visited once, so the cost is O(nnz(x) + nnz(y)) per pair whatever d is, and
    x_i - y_i is computed as such (l_inf distances can be compared bit for bit). Pairs go through
    in runs of about ``cells`` visited entries, which bounds the memory whatever their number."""
    X = sp.csr_matrix(X, copy=True)
    X.eliminate_zeros()  # "absent" and "stored 0" must read the same for the second pass
    X.sort_indices()
    n, width = X.shape
    g = 1 if group_size is None else math.ceil(width / group_size)
    ia, ib = np.asarray(ia, np.int64), np.asarray(ib, np.int64)
    flat = {p: np.zeros((ia.size, g)) for p in ps}
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(X.indptr))
    cols = X.indices.astype(np.int64)
    grp = np.zeros_like(cols) if group_size is None else cols // group_size
    used, comp = np.unique(cols, return_inverse=True)  # used columns, in order (groups stay contiguous)
    block = max(1, cells // max(n, 1))
    for c0 in range(0, used.size, block):
        sel = (comp >= c0) & (comp < c0 + block)
        r, c, v, gr = rows[sel], comp[sel] - c0, X.data[sel], grp[sel]  # still by row, then column
        D = np.zeros((n, min(block, used.size - c0)))
        D[r, c] = v
        count = np.bincount(r, minlength=n)
        start = np.concatenate([[0], np.cumsum(count)])
        for first, second, own in ((ia, ib, True), (ib, ia, False)):
            lens = count[first]
            ends = np.cumsum(lens)
            cuts = np.unique(np.r_[0, np.searchsorted(ends, np.arange(cells, ends[-1] if ends.size else 0, cells)),
                                   first.size])
            for k0, k1 in zip(cuts[:-1], cuts[1:]):
                idx, k = _ranges(start[first[k0:k1]], lens[k0:k1])
                if not idx.size:
                    continue
                other = D[second[k0 + k], c[idx]]
                diff = np.abs(v[idx] - other) if own else np.where(other == 0, np.abs(v[idx]), 0.0)
                cell = k * g + gr[idx]  # non-decreasing: entries come by pair, then by column
                for p in ps:
                    out = flat[p][k0:k1].reshape(-1)
                    if math.isinf(p):
                        bounds = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]])
                        at = cell[bounds]
                        out[at] = np.maximum(out[at], np.maximum.reduceat(diff, bounds))
                    else:
                        out += np.bincount(cell, weights=_power(diff, p), minlength=out.size)
    return flat


def norms(per_pair: dict[float, np.ndarray]) -> dict[float, np.ndarray]:
    """||x - y||_p from one-group sums (p-th root for finite p)."""
    return {p: (v[:, 0] if math.isinf(p) else v[:, 0] ** (1.0 / p)) for p, v in per_pair.items()}


def all_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair i < j of n points, in the order of a condensed distance matrix (scipy's)."""
    ia, ib = np.triu_indices(n, k=1)
    return ia.astype(np.int64), ib.astype(np.int64)


def square(condensed: np.ndarray, n: int) -> np.ndarray:
    """The n x n symmetric distance matrix from its condensed form (all_pairs order)."""
    D = np.zeros((n, n))
    ia, ib = np.triu_indices(n, k=1)
    D[ia, ib] = D[ib, ia] = condensed
    return D


def diameter(condensed: np.ndarray) -> tuple[float, int]:
    """Largest distance and the index of the pair that attains it."""
    k = int(np.argmax(condensed))
    return float(condensed[k]), k


def k_center(D: np.ndarray, k: int, start: int = 0) -> np.ndarray:
    """Gonzalez's farthest-first traversal on a distance matrix (a 2-approximation of k-center)."""
    centers = [start]
    dist = D[start].copy()
    for _ in range(1, min(k, D.shape[0])):
        nxt = int(np.argmax(dist))
        centers.append(nxt)
        dist = np.minimum(dist, D[nxt])
    return np.array(centers)


def k_center_cost(D: np.ndarray, centers: np.ndarray) -> float:
    """Largest distance from a point to its nearest center."""
    return float(D[:, centers].min(axis=1).max())
