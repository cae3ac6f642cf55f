"""Sparse data sets for sparse_embed: generators, and loaders for two real sparse formats.

Everything is a ``scipy.sparse`` CSR matrix, one vector per row, so d (the column count) can be in
the millions. Generators draw non-negative s-sparse vectors (exactly s non-zeros each):
independent random supports, or clusters (a prototype support and values per cluster, each
vector swapping some of its prototype's coordinates and jittering the values), which gives the
k-center task a structure to find. Loaders read

* the review corpus that installs offline (``iclr_ray.corpora.reviews``, 22,641 customer reviews)
  as a bag of words: word counts of the first n reviews over the corpus's whole vocabulary
  (scikit-learn's CountVectorizer), one row per review;
* UCI bag-of-words ``docword.*.txt`` (three header lines D, W, NNZ, then ``docID wordID count``
  lines, 1-based ids), the format of the NYTimes/PubMed/Enron/KOS corpora: word counts, non-negative;
* a scipy ``.npz`` sparse matrix (``scipy.sparse.save_npz``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ...config import ConfigError, DataError


def _distinct(rng: np.random.Generator, d: int, s: int, n: int) -> np.ndarray:
    """(n, s) coordinates, distinct within each row, uniform over [d]."""
    if s > d:
        raise ValueError(f"s = {s} non-zeros do not fit in d = {d} coordinates")
    out = rng.integers(0, d, size=(n, s))
    for _ in range(64):  # redraw repeated coordinates (rare when s << d)
        srt = np.sort(out, axis=1)
        dup = (srt[:, 1:] == srt[:, :-1]).any(axis=1)
        if not dup.any():
            return out
        out[dup] = rng.integers(0, d, size=(int(dup.sum()), s))
    return np.array([rng.choice(d, s, replace=False) for _ in range(n)])  # s close to d


def random_sparse(n: int, d: int, s: int, seed: int, clusters: int = 0, swap: float = 0.25,
                  jitter: float = 0.3) -> sp.csr_matrix:
    """n non-negative vectors in R^d with exactly s non-zeros each; values Exp(1) + 0.1 (never 0).

    With ``clusters`` > 0, vector i belongs to cluster i % clusters: it keeps each coordinate of the
    cluster's prototype support with probability 1 - swap (a fresh random coordinate otherwise) and
    multiplies the prototype's value by exp(jitter * N(0, 1))."""
    rng = np.random.default_rng(seed)
    if clusters <= 0:
        cols = _distinct(rng, d, s, n)
        vals = rng.exponential(1.0, size=(n, s)) + 0.1
    else:
        proto_cols = _distinct(rng, d, s, clusters)
        proto_vals = rng.exponential(1.0, size=(clusters, s)) + 0.1
        c = np.arange(n) % clusters
        cols = proto_cols[c].copy()
        vals = proto_vals[c] * np.exp(jitter * rng.standard_normal((n, s)))
        fresh = _distinct(rng, d, s, n)
        swapped = rng.random((n, s)) < swap
        cols[swapped] = fresh[swapped]
        for i in np.flatnonzero(swapped.any(axis=1)):  # a fresh coordinate may repeat a kept one
            _, first = np.unique(cols[i], return_index=True)
            while first.size < s:
                free = np.setdiff1d(np.arange(s), first)
                cols[i, free] = rng.integers(0, d, size=free.size)
                _, first = np.unique(cols[i], return_index=True)
    rows = np.repeat(np.arange(n), s)
    X = sp.csr_matrix((vals.ravel(), (rows, cols.ravel())), shape=(n, d))
    X.sort_indices()
    return X


def signed(X: sp.csr_matrix, seed: int) -> sp.csr_matrix:
    """The same vectors with a random sign on every non-zero."""
    Y = sp.csr_matrix(X, copy=True)
    Y.data *= np.where(np.random.default_rng(seed).random(Y.data.size) < 0.5, -1.0, 1.0)
    return Y


def sparsity(X: sp.csr_matrix) -> int:
    """s: the largest number of non-zeros in a vector."""
    return int(np.diff(X.indptr).max()) if X.shape[0] else 0


def reviews_bag_of_words(n: int | None = None) -> sp.csr_matrix:
    """Word counts of the first ``n`` reviews of the offline review corpus (all by default), one row
    per review, over the vocabulary of the whole corpus (CountVectorizer's defaults: lower case,
    tokens of two or more word characters). Reviews without such a token are dropped."""
    from ...corpora import reviews

    try:
        from sklearn.feature_extraction.text import CountVectorizer
    except ImportError:
        raise ConfigError("vectors.source=reviews builds its bag of words with scikit-learn: "
                          "pip install scikit-learn") from None
    X = sp.csr_matrix(CountVectorizer().fit_transform(reviews()), dtype=np.float64)
    X = X[np.diff(X.indptr) > 0]
    return _check(X[:n] if n is not None else X, Path("the review corpus"))


def load_docword(path: str | Path, max_docs: int | None = None) -> sp.csr_matrix:
    """UCI bag-of-words counts as a (documents x vocabulary) CSR matrix: documents 1..max_docs
    (all by default) that hold at least one word. Errors name the file and line."""
    path = Path(path)
    rows, cols, vals = [], [], []
    try:
        with path.open() as fh:
            head = []
            for lineno in (1, 2, 3):
                line = fh.readline()
                try:
                    head.append(int(line.strip()))
                except ValueError:
                    raise DataError(f"{path}:{lineno}: expected the header count (D, W, NNZ), got {line.strip()!r}") from None
            D, W, _ = head
            for lineno, line in enumerate(fh, start=4):
                parts = line.split()
                if not parts:
                    continue
                try:
                    doc, word, count = int(parts[0]), int(parts[1]), float(parts[2])
                    if len(parts) != 3:
                        raise ValueError
                except (ValueError, IndexError):
                    raise DataError(f"{path}:{lineno}: expected 'docID wordID count', got {line.strip()!r}") from None
                if not (1 <= doc <= D and 1 <= word <= W) or count < 0:
                    raise DataError(f"{path}:{lineno}: ids must lie in 1..{D} and 1..{W}, counts >= 0; got {line.strip()!r}")
                if max_docs is not None and doc > max_docs:
                    break  # the files list documents in id order
                rows.append(doc - 1), cols.append(word - 1), vals.append(count)
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None
    X = sp.csr_matrix((vals, (rows, cols)), shape=(D, W))
    X.sum_duplicates()
    X.eliminate_zeros()
    X = X[np.diff(X.indptr) > 0]
    return _check(X, path)


def load_npz(path: str | Path, max_rows: int | None = None) -> sp.csr_matrix:
    """A scipy sparse matrix saved with ``save_npz``; rows are vectors."""
    path = Path(path)
    try:
        X = sp.load_npz(path)
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"cannot read {path} as a scipy sparse .npz: {exc}") from None
    X = sp.csr_matrix(X, dtype=np.float64)
    X.eliminate_zeros()
    X = X[np.diff(X.indptr) > 0]
    return _check(X[:max_rows] if max_rows else X, path)


def _check(X: sp.csr_matrix, path: Path) -> sp.csr_matrix:
    if X.shape[0] < 2:
        raise DataError(f"{path}: need at least 2 non-zero vectors, found {X.shape[0]}")
    if X.data.size and X.data.min() < 0:
        raise DataError(f"{path}: the embedding experiments need non-negative vectors "
                        f"(found {int((X.data < 0).sum())} negative entries)")
    X.sort_indices()
    return X
