"""Exact pairwise l_p distances between sparse vectors, and the downstream tasks on a distance
matrix (no Ray, no I/O).

Distances are computed by merging the two supports of each pair (sort by (pair, coordinate), sum
x_i and -y_i per coordinate), so the cost is O(nnz(x) + nnz(y)) per pair whatever d is, and the
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


def pair_distances(X: sp.csr_matrix, ia: np.ndarray, ib: np.ndarray, ps: tuple[float, ...],
                   group_size: int | None = None, dense: bool | None = None) -> dict[float, np.ndarray]:
    """For pairs (X[ia[k]], X[ib[k]]): {p: array (pairs, groups)} of sum_{i in group} |x_i - y_i|^p
    (p finite) or max_{i in group} |x_i - y_i| (p = inf). Columns c belong to group c // group_size
    (one group of all columns when ``group_size`` is None). ``dense`` picks the path (both give the
    same numbers): by default dense rows when the matrix is narrow, as an embedding is."""
    X = sp.csr_matrix(X)
    width = X.shape[1]
    g = 1 if group_size is None else math.ceil(width / group_size)
    ia, ib = np.asarray(ia, np.int64), np.asarray(ib, np.int64)
    P = ia.size
    if dense is None:
        dense = width <= 16 * max(X.nnz / max(X.shape[0], 1), 1.0)
    if dense:
        return _dense_pair_distances(X.toarray(), ia, ib, ps, group_size or width, g)
    parts = []
    for rows, sign in ((ia, 1.0), (ib, -1.0)):
        idx, pair = _ranges(X.indptr[rows].astype(np.int64), np.diff(X.indptr)[rows].astype(np.int64))
        parts.append((pair * width + X.indices[idx], sign * X.data[idx]))
    key = np.concatenate([parts[0][0], parts[1][0]])
    val = np.concatenate([parts[0][1], parts[1][1]])
    order = np.argsort(key, kind="stable")
    key, val = key[order], val[order]
    out = {p: np.zeros((P, g)) for p in ps}
    if not key.size:
        return out
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    diff = np.abs(np.add.reduceat(val, first))  # x_i + (-y_i): bit-identical to x_i - y_i
    key = key[first]
    pair, col = key // width, key % width
    cell = pair * g + (0 if group_size is None else col // group_size)
    bounds = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]])  # cells come sorted, as the keys do
    for p in ps:
        if math.isinf(p):
            flat = np.zeros(P * g)
            flat[cell[bounds]] = np.maximum.reduceat(diff, bounds)
        else:
            flat = np.bincount(cell, weights=diff if p == 1 else diff**p, minlength=P * g)
        out[p] = flat.reshape(P, g)
    return out


def _dense_pair_distances(F: np.ndarray, ia, ib, ps, group_size: int, g: int, cells: int = 1 << 25):
    """pair_distances on dense rows, the same numbers (|x - 0| = x; x - y as in the sparse path),
    ``cells`` differences (256 MiB) at a time."""
    pad = g * group_size - F.shape[1]
    if pad:
        F = np.pad(F, ((0, 0), (0, pad)))
    chunk = max(1, cells // F.shape[1])
    out = {p: np.zeros((ia.size, g)) for p in ps}
    for lo in range(0, ia.size, chunk):
        diff = np.abs(F[ia[lo:lo + chunk]] - F[ib[lo:lo + chunk]]).reshape(-1, g, group_size)
        for p in ps:
            out[p][lo:lo + chunk] = diff.max(axis=2) if math.isinf(p) else (diff if p == 1 else diff**p).sum(axis=2)
    return out


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
