"""Inputs for coord_sketch: synthetic matrix pairs, attention products, and two keyed tables.

Every generator returns a :class:`Pair`: the two parties' matrices with their row keys. Keys are
int64 (row ids, or a 64-bit hash of a CSV join key), so the parties' shared hash sees the same
key for the same row without either party seeing the other's table.
"""
from __future__ import annotations

import csv
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ...config import DataError


@dataclass
class Pair:
    """Party A's rows (keys_a, A) and party B's rows (keys_b, B); AᵀB sums over shared keys."""

    keys_a: np.ndarray
    A: sp.csr_matrix
    keys_b: np.ndarray
    B: sp.csr_matrix

    def exact(self) -> np.ndarray:
        """AᵀB over the key join (for measuring error only: no party can compute this)."""
        _, ia, ib = np.intersect1d(self.keys_a, self.keys_b, assume_unique=True, return_indices=True)
        return np.asarray((self.A[ia].T @ self.B[ib]).todense())

    def fro(self) -> tuple[float, float]:
        return float(sp.linalg.norm(self.A)), float(sp.linalg.norm(self.B))


def _sparse_rows(rng: np.random.Generator, n: int, d: int, s: int, scale: np.ndarray) -> sp.csr_matrix:
    """n rows with s non-zeros each at distinct random columns, Gaussian values, row norm ~ scale."""
    cols = _distinct_cols(rng, n, d, s)
    vals = rng.standard_normal((n, s)) * (scale / np.sqrt(s))[:, None]
    indptr = np.arange(0, n * s + 1, s)
    return sp.csr_matrix((vals.ravel(), cols.ravel(), indptr), shape=(n, d))


def _distinct_cols(rng: np.random.Generator, n: int, d: int, s: int) -> np.ndarray:
    """n rows of s distinct column indices in [0, d)."""
    if 4 * s >= d:  # dense-ish rows: a random permutation per row, in chunks to bound memory
        chunk = max(1, 2**22 // d)
        return np.concatenate([np.argsort(rng.random((min(chunk, n - i), d)), axis=1)[:, :s]
                               for i in range(0, n, chunk)]) if n else np.zeros((0, s), dtype=np.int64)
    cols = rng.integers(0, d, (n, s))
    while True:  # redraw the rows that drew a column twice (rare when s << d)
        srt = np.sort(cols, axis=1)
        dup = np.flatnonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1))
        if dup.size == 0:
            return cols
        cols[dup] = rng.integers(0, d, (dup.size, s))


def heavy_tailed(rng: np.random.Generator, n: int, tail: float | None) -> np.ndarray:
    """Row scales: Pareto(tail) + 1 (heavy-tailed norms), or all ones when tail is None."""
    return np.ones(n) if tail is None else rng.pareto(tail, n) + 1.0


def sparse_pair(n: int, d: int, m: int, nnz: int, overlap: float, tail: float | None, seed: int) -> Pair:
    """n keys; a fraction ``overlap`` has non-zero rows in both A and B, the rest split between
    A only and B only. Each non-zero row has ``nnz`` non-zeros and a heavy-tailed norm."""
    rng = np.random.default_rng(seed)
    keys = rng.permutation(n).astype(np.int64)
    n_both = int(round(overlap * n))
    n_only = (n - n_both) // 2
    keys_a = np.sort(keys[: n_both + n_only])
    keys_b = np.sort(np.concatenate([keys[:n_both], keys[n_both + n_only:]]))
    A = _sparse_rows(rng, len(keys_a), d, min(nnz, d), heavy_tailed(rng, len(keys_a), tail))
    B = _sparse_rows(rng, len(keys_b), m, min(nnz, m), heavy_tailed(rng, len(keys_b), tail))
    return Pair(keys_a, A, keys_b, B)


def attention_pair(seq_len: int, d_head: int, tail: float, product: str, seed: int,
                   top_k: int | None = None) -> Pair:
    """Attention-style products over the sequence axis, with heavy-tailed tokens.

    ``product="qk"``: A = Q, B = K with ReLU-sparse activations and heavy-tailed token norms
    (Pareto(tail) + 1), AᵀB = QᵀK (d x d).
    ``product="pv"``: A = Pᵀ, B = V, AᵀB = PV, the attention output, with
    P = softmax(QKᵀ/sqrt(d) + log s) for Gaussian Q, K and a heavy-tailed salience s_j per key
    (a few "sink" keys draw much of the attention, as in trained LMs), and V rows with
    heavy-tailed norms. With ``top_k``, each query keeps its top_k attention weights (renormalised),
    as sparse attention does, and Pᵀ is sparse.
    """
    rng = np.random.default_rng(seed)
    keys = np.arange(seq_len, dtype=np.int64)
    if product == "qk":
        def tokens() -> np.ndarray:
            X = np.maximum(rng.standard_normal((seq_len, d_head)), 0.0)
            return X * (heavy_tailed(rng, seq_len, tail) / np.sqrt(d_head))[:, None]

        return Pair(keys, sp.csr_matrix(tokens()), keys, sp.csr_matrix(tokens()))
    if product != "pv":
        raise ValueError(f"unknown attention product {product!r}")
    Q, K = rng.standard_normal((2, seq_len, d_head))
    logits = Q @ K.T / np.sqrt(d_head) + np.log(heavy_tailed(rng, seq_len, tail))[None, :]
    logits -= logits.max(axis=1, keepdims=True)
    P = np.exp(logits)
    P /= P.sum(axis=1, keepdims=True)
    if top_k is not None:
        P = top_k_rows(P, top_k)
    V = rng.standard_normal((seq_len, d_head)) * (heavy_tailed(rng, seq_len, tail) / np.sqrt(d_head))[:, None]
    return Pair(keys, sp.csr_matrix(P.T), keys, sp.csr_matrix(V))


# --- a real pretrained LM's attention on real text ------------------------------------------


@dataclass
class HeadQKV:
    """One query head's inputs to attention in a real model, over one token sequence: its queries
    Q, its group's keys K (RoPE applied as the model applies it) and values V, each n x d_head,
    and ``out``, the attention output the model itself computed for this head (for checking)."""

    layer: int
    head: int
    kv_head: int
    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    out: np.ndarray


def review_tokens(tokenizer, texts: list[str], seq_len: int) -> np.ndarray:
    """The first ``seq_len`` token ids of the texts joined by blank lines (DataError when short)."""
    ids = tokenizer("\n\n".join(texts), add_special_tokens=False)["input_ids"]
    if len(ids) < seq_len:
        raise DataError(f"{len(texts)} review texts give {len(ids)} tokens, fewer than attention.seq_len = {seq_len}")
    return np.asarray(ids[:seq_len], dtype=np.int64)


def lm_attention(model_name: str, token_ids: np.ndarray, layers: list[int], heads: list[int]) -> list[HeadQKV]:
    """Q, K, V of the query heads ``heads`` of the decoder layers ``layers`` of a causal LM
    (Llama-style: q/k/v projections, rotary embeddings, grouped-query attention), from one forward
    pass over ``token_ids`` (no training, no sampling).

    A forward pre-hook on each chosen layer's attention module receives the hidden states and the
    (cos, sin) the model passes it; Q, K, V are that module's own projections of them, with the
    rotary embedding applied by the model's own ``apply_rotary_pos_emb``. A pre-hook on ``o_proj``
    records the attention output the model computed, so a caller can check softmax(QKᵀ/√d)V
    against it."""
    import sys

    import torch

    from ...llm import pretrained
    from ...llm.model import inference_device

    # float32 on any device: the captured Q, K, V must reproduce the model's own output closely
    model, _ = pretrained.load(model_name, dtype=torch.float32)
    model = model.to(inference_device()).eval()
    decoder = model.model.layers
    caught: dict[int, dict] = {}

    def qkv_hook(layer: int):
        def hook(module, args, kwargs):
            h = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
            cos, sin = kwargs["position_embeddings"] if "position_embeddings" in kwargs else args[1]
            shape = (*h.shape[:-1], -1, module.head_dim)
            q = module.q_proj(h).view(shape).transpose(1, 2)
            k = module.k_proj(h).view(shape).transpose(1, 2)
            v = module.v_proj(h).view(shape).transpose(1, 2)
            rope = sys.modules[type(module).__module__].apply_rotary_pos_emb
            q, k = rope(q, k, cos, sin)
            caught[layer].update(q=q[0], k=k[0], v=v[0], groups=module.num_key_value_groups, d=module.head_dim)
        return hook

    def out_hook(layer: int):
        def hook(module, args):
            caught[layer]["out"] = args[0][0]
        return hook

    handles = []
    for layer in layers:
        caught[layer] = {}
        attn = decoder[layer].self_attn
        handles.append(attn.register_forward_pre_hook(qkv_hook(layer), with_kwargs=True))
        handles.append(attn.o_proj.register_forward_pre_hook(out_hook(layer)))
    try:
        with torch.no_grad():
            model(torch.as_tensor(token_ids, device=next(model.parameters()).device)[None], use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    out = []
    for layer in layers:
        c = caught[layer]
        d, g = c["d"], c["groups"]
        for head in heads:
            kv = head // g
            out.append(HeadQKV(layer, head, kv, *(t.cpu().double().numpy() for t in
                                                   (c["q"][head], c["k"][kv], c["v"][kv], c["out"][:, head * d:(head + 1) * d]))))
    return out


def causal_softmax(Q: np.ndarray, K: np.ndarray) -> np.ndarray:
    """P = softmax(QKᵀ/√d) with the causal mask (query i attends to keys j <= i), n x n."""
    n, d = Q.shape
    logits = Q @ K.T / np.sqrt(d)
    logits[np.triu_indices(n, 1)] = -np.inf
    logits -= logits.max(axis=1, keepdims=True)
    P = np.exp(logits)
    return P / P.sum(axis=1, keepdims=True)


def top_k_rows(P: np.ndarray, top_k: int) -> np.ndarray:
    """Each row of P keeps its ``top_k`` largest weights, renormalised to sum to 1 (sparse
    attention); rows with fewer non-zeros keep them all."""
    n = P.shape[1]
    if top_k >= n:
        return P
    P = P.copy()
    drop = np.argpartition(P, n - top_k, axis=1)[:, : n - top_k]
    np.put_along_axis(P, drop, 0.0, axis=1)
    return P / P.sum(axis=1, keepdims=True)


def head_pairs(h: HeadQKV, top_k: int | None = None) -> dict[str, Pair]:
    """The products of one head over the sequence axis (keys = token positions):
    ``qk``: A = Q, B = K, AᵀB = QᵀK (d x d); ``pv``: A = Pᵀ, B = V, AᵀB = PV = the head's output
    (n x d), with P the causal softmax attention (row j of Pᵀ is the attention key j receives);
    with ``top_k``, ``pv_topk``: the same with each query keeping its top_k weights."""
    n = len(h.Q)
    keys = np.arange(n, dtype=np.int64)
    P = causal_softmax(h.Q, h.K)
    out = {"qk": Pair(keys, sp.csr_matrix(h.Q), keys, sp.csr_matrix(h.K)),
           "pv": Pair(keys, sp.csr_matrix(P.T), keys, sp.csr_matrix(h.V))}
    if top_k is not None:
        out["pv_topk"] = Pair(keys, sp.csr_matrix(top_k_rows(P, top_k).T), keys, sp.csr_matrix(h.V))
    return out


# --- two keyed tables: distributed linear regression across a join ---------------------------


@dataclass
class Tables:
    """Party A: features X keyed by join key. Party B: target y keyed by join key."""

    keys_x: np.ndarray
    X: np.ndarray
    keys_y: np.ndarray
    y: np.ndarray
    feature_names: list[str]
    source: str = "synthetic"

    def check_join(self) -> None:
        """Enough joined rows to fit the coefficients (intercept included), else a DataError."""
        n, p = np.intersect1d(self.keys_x, self.keys_y).size, self.X.shape[1] + 1
        if n < p:
            raise DataError(f"the {self.source} tables join on {n} keys, fewer than the {p} coefficients to fit")


def synthetic_tables(n_keys: int, n_features: int, coverage_x: float, coverage_y: float,
                     noise: float, seed: int) -> Tables:
    """Two tables over a key universe: X covers ``coverage_x`` of the keys, y covers ``coverage_y``;
    on the join y = [1, x]·theta + noise."""
    rng = np.random.default_rng(seed)
    X_all = rng.standard_normal((n_keys, n_features))
    theta = rng.standard_normal(n_features + 1)
    y_all = theta[0] + X_all @ theta[1:] + noise * rng.standard_normal(n_keys)
    keys_x = np.sort(rng.choice(n_keys, int(coverage_x * n_keys), replace=False)).astype(np.int64)
    keys_y = np.sort(rng.choice(n_keys, int(coverage_y * n_keys), replace=False)).astype(np.int64)
    names = [f"x{j}" for j in range(n_features)]
    return Tables(keys_x, X_all[keys_x], keys_y, y_all[keys_y], names)


def regression_pair(t: Tables) -> Pair:
    """One matrix product holds the normal equations of the join: with x̃ = [1, x],
    A_i = [vec(x̃ x̃ᵀ), x̃] for X's keys and B_i = [1, y_i] for y's keys, so
    AᵀB = [[Σ vec(x̃x̃ᵀ), ·], [·, Σ x̃ y]] summed over the join only."""
    Xt = np.hstack([np.ones((len(t.X), 1)), t.X])
    A = np.hstack([np.einsum("ni,nj->nij", Xt, Xt).reshape(len(Xt), -1), Xt])
    B = np.stack([np.ones_like(t.y), t.y], axis=1)
    return Pair(t.keys_x, sp.csr_matrix(A), t.keys_y, sp.csr_matrix(B))


def normal_equations(W: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    """(X̃ᵀX̃, X̃ᵀy) on the join from W ≈ AᵀB of :func:`regression_pair` (p = features + 1)."""
    XtX = W[: p * p, 0].reshape(p, p)
    Xty = W[p * p:, 1]
    return (XtX + XtX.T) / 2, Xty


def solve(XtX: np.ndarray, Xty: np.ndarray, ridge: float) -> np.ndarray:
    """theta = (X̃ᵀX̃ + ridge·tr/p·I)⁻¹ X̃ᵀy; the small ridge keeps noisy sketched systems solvable."""
    p = len(Xty)
    lam = ridge * max(np.trace(XtX) / p, 1e-12)
    return np.linalg.lstsq(XtX + lam * np.eye(p), Xty, rcond=None)[0]


def join(t: Tables) -> tuple[np.ndarray, np.ndarray]:
    """The exact join (for measuring only): X̃ and y on shared keys."""
    _, ix, iy = np.intersect1d(t.keys_x, t.keys_y, assume_unique=True, return_indices=True)
    return np.hstack([np.ones((ix.size, 1)), t.X[ix]]), t.y[iy]


def key_id(value: str) -> int:
    """A join key (any string) as a signed 64-bit id; both parties compute it the same way."""
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "little", signed=True)


def _read_csv(path: Path, key: str, columns: list[str] | None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    try:
        f = open(path, newline="")
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None
    with f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            raise DataError(f"{path} is empty (expected a header row)")
        header = [h.strip() for h in header]
        if key not in header:
            raise DataError(f"{path}: no key column {key!r} (columns: {', '.join(header)})")
        if columns is None:
            columns = [h for h in header if h != key]
        missing = [c for c in columns if c not in header]
        if missing:
            raise DataError(f"{path}: no column {missing[0]!r} (columns: {', '.join(header)})")
        ki, ci = header.index(key), [header.index(c) for c in columns]
        keys, rows, seen = [], [], {}
        for lineno, rec in enumerate(reader, start=2):
            if not rec or all(not v.strip() for v in rec):
                continue
            if len(rec) != len(header):
                raise DataError(f"{path}:{lineno}: {len(rec)} fields, header has {len(header)}")
            k = rec[ki].strip()
            if k in seen:
                raise DataError(f"{path}:{lineno}: key {k!r} repeats line {seen[k]} (join keys must be unique)")
            seen[k] = lineno
            try:
                row = [float(rec[i]) for i in ci]
                if not all(map(math.isfinite, row)):
                    raise ValueError
                rows.append(row)
            except ValueError:
                bad = next(c for c, i in zip(columns, ci) if not _is_number(rec[i]))
                raise DataError(f"{path}:{lineno}: column {bad!r} is not a finite number: {rec[header.index(bad)]!r}") from None
            keys.append(key_id(k))
    if not rows:
        raise DataError(f"{path} has a header but no data rows")
    return np.array(keys, dtype=np.int64), np.array(rows, dtype=np.float64), columns


def _is_number(s: str) -> bool:
    try:
        return math.isfinite(float(s))
    except ValueError:
        return False


def load_tables(features_csv: str | Path, target_csv: str | Path, key: str, target: str,
                features: list[str] | None = None) -> Tables:
    """Two CSV tables joined on ``key``: features (all columns but the key, or ``features``) and a
    target column. Keys may be any strings; rows are sorted by key id as the sketches expect."""
    kx, X, names = _read_csv(Path(features_csv), key, features)
    ky, Y, _ = _read_csv(Path(target_csv), key, [target])
    ox, oy = np.argsort(kx), np.argsort(ky)
    if np.intersect1d(kx, ky).size == 0:
        raise DataError(f"{features_csv} and {target_csv} share no {key!r} values: the join is empty")
    return Tables(kx[ox], X[ox], ky[oy], Y[oy, 0], names, source="csv")
