"""coord_sketch on Ray: every party's sketch is its own Ray task; a third task forms the estimate
from the two sketches alone and measures its error against the exact product (which only the
experiment, never a party, computes)."""
from __future__ import annotations

from typing import Any

import numpy as np
import ray

from ...runtime import RunContext
from . import data, sketches
from .config import Config
from .sketches import SAMPLING


def prepare(cfg: Config) -> data.Tables:
    """The regression tables, read (CSV) or generated, and checked before Ray starts, so a bad
    file or an empty join exits 2 at once."""
    r = cfg.regression
    if r.features_csv is None:
        tables = data.synthetic_tables(r.n_keys, r.features, r.coverage_x, r.coverage_y, r.noise, cfg.seed + 4)
    else:
        tables = data.load_tables(r.features_csv, r.target_csv, r.key, r.target, r.feature_columns)
    tables.check_join()
    return tables


@ray.remote(num_cpus=1)
def sketch_party(X, keys: np.ndarray, method: str, k: int, seed: int) -> sketches.Sketch:
    return sketches.sketch(method, X, keys, k, seed)


@ray.remote(num_cpus=1)
def estimate_and_measure(sa, sb, exact: np.ndarray, fro_a: float, fro_b: float, keep_w: bool) -> dict:
    W = sketches.estimate(sa, sb)
    out = {"error": sketches.relative_error(W, exact, fro_a, fro_b), "storage": sa.storage + sb.storage}
    if keep_w:
        out["W"] = W
    return out


def shared_seed(root: int, i: int) -> int:
    """The seed the two parties agree on for repetition i (the same for every method: paired runs)."""
    return root * 1_000_003 + i


def measure(ctx: RunContext, name: str, pair: data.Pair, methods: list[str], sketch_rows: list[int],
          seeds: int, root_seed: int, keep_w: bool = False) -> list[dict[str, Any]]:
    """Error of every method at every budget over ``seeds`` shared seeds; one record per cell."""
    fro_a, fro_b = pair.fro()
    exact = ray.put(pair.exact())
    A, B = ray.put(pair.A), ray.put(pair.B)
    keys_a, keys_b = ray.put(pair.keys_a), ray.put(pair.keys_b)
    cells, refs = [], []
    for method in methods:
        for rows in sketch_rows:
            if method in SAMPLING:  # same stored numbers as a rows x d (rows x m) linear sketch
                k_a = sketches.sampling_size(pair.A, rows * pair.A.shape[1])
                k_b = sketches.sampling_size(pair.B, rows * pair.B.shape[1])
            else:
                k_a = k_b = rows
            for i in range(seeds):
                seed = shared_seed(root_seed, i)
                sa = sketch_party.remote(A, keys_a, method, k_a, seed)
                sb = sketch_party.remote(B, keys_b, method, k_b, seed)
                refs.append(estimate_and_measure.remote(sa, sb, exact, fro_a, fro_b, keep_w))
                cells.append({"experiment": name, "method": method, "sketch_rows": rows,
                              "k_a": k_a, "k_b": k_b, "seed": i})
    outs = ctx.wait_all(refs, f"{name}: {len(refs)} estimates from {2 * len(refs)} party sketches")
    records = []
    for cell, out in zip(cells, outs):
        rec = {**cell, "error": out["error"], "storage": out["storage"]}
        ctx.log(**rec)
        if keep_w:
            rec["W"] = out["W"]
        records.append(rec)
    return records


def summarise(records: list[dict[str, Any]], extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Mean and spread per (method, budget); per-seed errors kept for the guarantee check."""
    rows = []
    for key in dict.fromkeys((r["method"], r["sketch_rows"]) for r in records):
        group = [r for r in records if (r["method"], r["sketch_rows"]) == key]
        errors = np.array([r["error"] for r in group])
        row = {"method": key[0], "sketch_rows": key[1], "k_a": group[0]["k_a"], "k_b": group[0]["k_b"],
               "storage": float(np.mean([r["storage"] for r in group])),
               "error_mean": float(errors.mean()), "error_std": float(errors.std()),
               "errors": errors.tolist()}
        for name in extra:
            row[f"{name}_mean"] = float(np.mean([r[name] for r in group]))
        rows.append(row)
    return rows


def unbiasedness(records: list[dict[str, Any]], pair: data.Pair) -> dict[str, Any]:
    """Per method: ||mean_T W - AᵀB||² against the unbiased expectation E||W - AᵀB||² / T.

    For an unbiased estimator the ratio is about 1 (it is exactly 1 in expectation); a bias b adds
    about T ||b||² / E||W - AᵀB||² to it, so it grows with T."""
    exact = pair.exact()
    fa, fb = pair.fro()
    out = {}
    for method in dict.fromkeys(r["method"] for r in records):
        Ws = np.stack([r["W"] for r in records if r["method"] == method])
        T = len(Ws)
        sq = np.array([np.linalg.norm(W - exact) ** 2 for W in Ws])
        running = np.cumsum(Ws, axis=0) / np.arange(1, T + 1)[:, None, None]
        checkpoints = sorted({int(t) for t in np.unique(np.geomspace(1, T, 12).astype(int))})
        curve = [[t, float(np.linalg.norm(running[t - 1] - exact) / (fa * fb))] for t in checkpoints]
        out[method] = {
            "seeds": T,
            "ratio": float(np.linalg.norm(running[-1] - exact) ** 2 / (sq.mean() / T)),
            "single_error": float(np.sqrt(sq.mean()) / (fa * fb)),
            "mean_error": curve[-1][1],
            "curve": curve,
        }
    return out


def regression(ctx: RunContext, cfg: Config, tables: data.Tables) -> dict[str, Any]:
    pair = data.regression_pair(tables)
    p = tables.X.shape[1] + 1
    Xj, yj = data.join(tables)
    theta = data.solve(Xj.T @ Xj, Xj.T @ yj, 0.0)
    ss_tot = float(np.sum((yj - yj.mean()) ** 2))

    def r2(th: np.ndarray) -> float:
        return 1.0 - float(np.sum((yj - Xj @ th) ** 2)) / ss_tot

    records = measure(ctx, "regression", pair, cfg.methods, cfg.sketch_rows, cfg.seeds, cfg.seed + 4, keep_w=True)
    for rec in records:
        th = data.solve(*data.normal_equations(rec.pop("W"), p), cfg.regression.ridge)
        rec["theta_error"] = float(np.linalg.norm(th - theta) / np.linalg.norm(theta))
        rec["r2"] = r2(th)
    return {"source": tables.source, "join_rows": int(len(yj)), "keys_x": int(len(tables.keys_x)), "keys_y": int(len(tables.keys_y)),
            "r2_exact": r2(theta), "rows": summarise(records, extra=("theta_error", "r2"))}


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    s = cfg.sparse
    metrics: dict[str, Any] = {}
    pair = data.sparse_pair(s.n, s.d, s.m, s.nnz, s.overlap, s.tail, cfg.seed)
    metrics["sparse"] = summarise(measure(ctx, "sparse", pair, cfg.methods, cfg.sketch_rows, cfg.seeds, cfg.seed))

    dn = cfg.dense
    pair = data.sparse_pair(dn.n, dn.d, dn.m, max(dn.d, dn.m), 1.0, None, cfg.seed + 1)
    metrics["dense"] = summarise(measure(ctx, "dense", pair, cfg.methods, cfg.sketch_rows, cfg.seeds, cfg.seed + 1))

    u = cfg.unbiased
    pair = data.sparse_pair(u.n, u.d, u.m, u.nnz, 0.3, u.tail, cfg.seed + 2)
    recs = measure(ctx, "unbiased", pair, cfg.methods, [u.sketch_rows], u.seeds, cfg.seed + 2, keep_w=True)
    metrics["unbiased"] = unbiasedness(recs, pair)

    at = cfg.attention
    for name, product, top_k in (("qk", "qk", None), ("pv", "pv", None), ("pv_topk", "pv", at.top_k)):
        pair = data.attention_pair(at.seq_len, at.d_head, at.tail, product, cfg.seed + 3, top_k=top_k)
        metrics[f"attention_{name}"] = summarise(
            measure(ctx, f"attention_{name}", pair, cfg.methods, cfg.sketch_rows, cfg.seeds, cfg.seed + 3))

    metrics["regression"] = regression(ctx, cfg, ctx.inputs)
    return metrics
