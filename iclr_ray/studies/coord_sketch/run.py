"""coord_sketch on Ray: every party's sketch is its own Ray task; a third task forms the estimate
from the two sketches alone and measures its error against the exact product (which only the
experiment, never a party, computes). The real attention inputs come from one Ray task that runs
the pretrained LM once."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray

from ...runtime import RunContext
from . import analysis, data, sketches
from .config import Config


@dataclass
class Inputs:
    """What prepare() checked before Ray starts: the regression tables and, for the real attention
    experiment, the token ids of the review text."""

    tables: data.Tables
    token_ids: np.ndarray | None = None
    text: dict[str, Any] = field(default_factory=dict)


def prepare(cfg: Config) -> Inputs:
    """The regression tables, read (CSV) or generated, and checked; for the real attention
    experiment the model (installed, converted once, its layers and heads exist) and the review
    text tokenised. Everything wrong exits 2 here, before Ray starts."""
    r = cfg.regression
    if r.features_csv is None:
        tables = data.synthetic_tables(r.n_keys, r.features, r.coverage_x, r.coverage_y, r.noise, cfg.seed + 4)
    else:
        tables = data.load_tables(r.features_csv, r.target_csv, r.key, r.target, r.feature_columns)
    tables.check_join()
    at = cfg.attention
    if at.model is None:
        return Inputs(tables)
    from ... import corpora
    from ...config import ConfigError
    from ...llm import pretrained

    corpora.reviews_path()  # the corpus is installed (one line naming the pip command if not)
    pretrained.check_available(at.model)
    mc = pretrained.load_config(at.model)
    heads = mc.num_attention_heads
    bad_layers = [x for x in at.layers if not 0 <= x < mc.num_hidden_layers]
    bad_heads = [x for x in at.heads if not 0 <= x < heads]
    if bad_layers or bad_heads:
        what = (f"attention.layers {bad_layers}: {at.model} has {mc.num_hidden_layers} layers" if bad_layers else
                f"attention.heads {bad_heads}: {at.model} has {heads} query heads")
        raise ConfigError(what)
    if at.seq_len > getattr(mc, "max_position_embeddings", at.seq_len):
        raise ConfigError(f"attention.seq_len {at.seq_len} exceeds {at.model}'s {mc.max_position_embeddings} positions")
    texts = corpora.reviews(max_docs=max(16, at.seq_len // 16), min_words=5)
    ids = data.review_tokens(pretrained.load_tokenizer(at.model), texts, at.seq_len)
    return Inputs(tables, ids, {"corpus": "Women's E-Commerce Clothing Reviews", "reviews": len(texts)})


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


def lm_attention(model: str, token_ids: np.ndarray, layers: list[int], heads: list[int]) -> list[data.HeadQKV]:
    return data.lm_attention(model, token_ids, layers, heads)


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
            # sampling sketches get the stored numbers of a rows x d (rows x m) linear sketch
            k_a, k_b = sketches.size_for(method, pair.A, rows), sketches.size_for(method, pair.B, rows)
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


def exact_at_full_size(pair: data.Pair, seed: int) -> dict[str, float]:
    """Per sampling method, the relative error when k covers every non-zero row (it must be 0:
    every row is kept with probability 1)."""
    fa, fb = pair.fro()
    exact = pair.exact()
    out = {}
    for m in sketches.SAMPLING:
        sa = sketches.sketch(m, pair.A, pair.keys_a, sketches.full_size(m, pair.A), seed)
        sb = sketches.sketch(m, pair.B, pair.keys_b, sketches.full_size(m, pair.B), seed)
        out[m] = sketches.relative_error(sketches.estimate(sa, sb), exact, fa, fb)
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
    return {"source": tables.source, "join_rows": int(len(yj)), "keys_x": int(len(tables.keys_x)),
            "keys_y": int(len(tables.keys_y)), "r2_exact": r2(theta),
            "rows": analysis.summarise(records, extra=("theta_error", "r2"))}


def attention(ctx: RunContext, cfg: Config, inputs: Inputs) -> dict[str, Any]:
    """The attention products: a real LM's heads (cfg.attention.model) or the synthetic stand-in."""
    at = cfg.attention
    products = []
    if at.model is None:
        for name, product, top_k in (("qk", "qk", None), ("pv", "pv", None), ("pv_topk", "pv", at.top_k)):
            if name == "pv_topk" and top_k is None:
                continue
            pair = data.attention_pair(at.seq_len, at.d_head, at.tail, product, cfg.seed + 3, top_k=top_k)
            products.append({"product": name, "layer": None, "head": None, **analysis.pair_stats(pair),
                             "rows": analysis.summarise(measure(ctx, f"attention_{name}", pair, cfg.methods,
                                                                cfg.sketch_rows, cfg.seeds, cfg.seed + 3))})
        return {"source": "synthetic", "seq_len": at.seq_len, "products": products}
    ctx.say("attention: %s over %d review tokens, layers %s, query heads %s", at.model, at.seq_len, at.layers, at.heads)
    task = ray.remote(lm_attention).options(num_cpus=1)
    [heads] = ctx.wait_all([task.remote(at.model, inputs.token_ids, at.layers, at.heads)],
                           f"attention: one forward pass of {at.model}")
    for h in heads:
        for name, pair in data.head_pairs(h, at.top_k).items():
            products.append({"product": name, "layer": h.layer, "head": h.head, "kv_head": h.kv_head,
                             **analysis.pair_stats(pair),
                             "rows": analysis.summarise(measure(ctx, f"attention_{name}_L{h.layer}H{h.head}", pair,
                                                                cfg.methods, cfg.sketch_rows, cfg.seeds,
                                                                cfg.seed + 3))})
    return {"source": at.model, "seq_len": at.seq_len, "text": inputs.text, "products": products}


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    s = cfg.sparse
    metrics: dict[str, Any] = {"zero_error": {}}
    pair = data.sparse_pair(s.n, s.d, s.m, s.nnz, s.overlap, s.tail, cfg.seed)
    metrics["zero_error"]["sparse"] = analysis.zero_error(pair.exact(), *pair.fro())
    metrics["sparse"] = analysis.summarise(measure(ctx, "sparse", pair, cfg.methods, cfg.sketch_rows, cfg.seeds,
                                                   cfg.seed))

    dn = cfg.dense
    pair = data.sparse_pair(dn.n, dn.d, dn.m, max(dn.d, dn.m), 1.0, None, cfg.seed + 1)
    metrics["zero_error"]["dense"] = analysis.zero_error(pair.exact(), *pair.fro())
    metrics["dense"] = analysis.summarise(measure(ctx, "dense", pair, cfg.methods, cfg.sketch_rows, cfg.seeds,
                                                  cfg.seed + 1))

    u = cfg.unbiased
    pair = data.sparse_pair(u.n, u.d, u.m, u.nnz, 0.3, u.tail, cfg.seed + 2)
    recs = measure(ctx, "unbiased", pair, cfg.methods, [u.sketch_rows], u.seeds, cfg.seed + 2, keep_w=True)
    metrics["unbiased"] = analysis.unbiasedness(recs, pair.exact(), *pair.fro())
    metrics["exact_at_full_size"] = exact_at_full_size(pair, shared_seed(cfg.seed + 2, 0))

    metrics["attention"] = attention(ctx, cfg, ctx.inputs)
    metrics["regression"] = regression(ctx, cfg, ctx.inputs.tables)
    reg_pair = data.regression_pair(ctx.inputs.tables)
    metrics["zero_error"]["regression"] = analysis.zero_error(reg_pair.exact(), *reg_pair.fro())
    return metrics


def _csr_bytes(rows: int, nnz: int) -> int:
    """A CSR matrix of float64 values with int32 column indices and row pointers."""
    return 12 * nnz + 4 * (rows + 1)


def _measure_stage(name: str, cfg: Config, a: tuple, b: tuple, sketch_rows: list[int], seeds: int,
                   pairs: int = 1, note: str = ""):
    """The Ray tasks of ``pairs`` calls of measure() on matrices of the shapes a and b, each
    (rows, width, non-zeros): two party sketches and one estimate per method x budget x seed."""
    from ...plan import Tasks

    k = max(sketch_rows)
    # a party: its CSR matrix, two working copies (row norms / A[nz]), per-row hashes and ranks, the
    # JL sketch's rows x k Gaussian matrix and a k x width linear sketch (all float64)
    party = max(3 * _csr_bytes(r, z) + 8 * r * (k + 4) + 8 * k * w for r, w, z in (a, b))
    # the estimate: the exact product, W and W - exact (width_a x width_b) and the two sketches
    est = 8 * 3 * a[1] * b[1] + 2 * 8 * k * (a[1] + b[1])
    tasks = 3 * len(cfg.methods) * len(sketch_rows) * seeds * pairs
    return Tasks(name, None, tasks, float(max(party, est)),
                 note=f"{pairs} x {len(cfg.methods)} methods x {len(sketch_rows)} budget(s) x {seeds} seeds x "
                      f"(2 party sketches + 1 estimate); A {a[0]:,} x {a[1]:,} ({a[2]:,} non-zeros), B {b[0]:,} x "
                      f"{b[1]:,} ({b[2]:,}); memory: the larger of a party task (its CSR matrix three times, "
                      f"rows x (k+4) float64 of hashes and JL Gaussians, k = {k}) and an estimate task (3 dense "
                      f"products and two sketches){'; ' + note if note else ''}")


def _sparse_shapes(n: int, d: int, m: int, nnz: int, overlap: float) -> tuple[tuple, tuple]:
    """The party shapes data.sparse_pair draws (rows, width, non-zeros)."""
    both = int(round(overlap * n))
    only = (n - both) // 2
    ra, rb = both + only, n - only
    return (ra, d, ra * min(nnz, d)), (rb, m, rb * min(nnz, m))


def plan(cfg: Config) -> list:
    """The sparse, dense and unbiasedness experiments, the attention products (a real LM's forward
    pass first, one Ray task, when attention.model is set) and the regression: CPU Ray tasks."""
    from ...plan import Tasks, lm, weights_bytes

    s, dn, u, at, r = cfg.sparse, cfg.dense, cfg.unbiased, cfg.attention, cfg.regression
    stages = [_measure_stage("sparse", cfg, *_sparse_shapes(s.n, s.d, s.m, s.nnz, s.overlap), cfg.sketch_rows,
                             cfg.seeds),
              _measure_stage("dense", cfg, *_sparse_shapes(dn.n, dn.d, dn.m, max(dn.d, dn.m), 1.0), cfg.sketch_rows,
                             cfg.seeds),
              _measure_stage("unbiased", cfg, *_sparse_shapes(u.n, u.d, u.m, u.nnz, 0.3), [u.sketch_rows], u.seeds)]
    n, products = at.seq_len, 2 + (at.top_k is not None)
    p_nnz = n * min(at.top_k, n) if at.top_k is not None else None
    if at.model is None:
        qk, d, heads, pv_nnz = (n, at.d_head, n * at.d_head // 2), at.d_head, 1, n * n
    else:
        model = lm(at.model)
        c = model.config
        d = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        qk, heads, pv_nnz = (n, d, n * d), len(at.layers) * len(at.heads), n * (n + 1) // 2
        kv = c.num_key_value_heads
        mem = (weights_bytes(model, bf16=False) + 4 * n * c.vocab_size + 2 * 4 * c.num_attention_heads * n * n
               + 4 * len(at.layers) * n * d * (c.num_attention_heads + 2 * kv + c.num_attention_heads)
               + 8 * heads * 4 * n * d)
        flops = 2 * model.params * n + 4 * c.num_hidden_layers * c.num_attention_heads * n * n * d
        stages.append(Tasks("attention", None, 1, float(mem), model=model, flops=float(flops),
                            note=f"one fp32 forward pass over {n:,} tokens, no gradients; memory: fp32 weights, "
                                 f"the logits (tokens x vocab), one layer's attention scores and softmax "
                                 f"(heads x tokens², eager attention: an upper bound), the caught Q/K/V/outputs of "
                                 f"{len(at.layers)} layers (fp32) and {heads} heads' Q, K, V, out as float64; "
                                 f"FLOPs: 2 x params x tokens + 4 x layers x heads x tokens² x head_dim"))
    # per head: qk (Q, K: tokens x head_dim), pv (Pᵀ: tokens x tokens, V), pv_topk (Pᵀ keeps top_k a query)
    pv = (n, n, pv_nnz if p_nnz is None else max(pv_nnz, p_nnz))
    stages.append(_measure_stage("attention products", cfg, pv, (n, d, n * d), cfg.sketch_rows, cfg.seeds,
                                 pairs=heads * products,
                                 note=f"{heads} head(s) x {products} products (qk, pv{', pv_topk' * (products > 2)}); "
                                      f"shapes of the largest (pv), qk: {qk[0]:,} x {qk[1]}"))
    p = r.features + 1
    ra, rb = int(r.coverage_x * r.n_keys), int(r.coverage_y * r.n_keys)
    stages.append(_measure_stage("regression", cfg, (ra, p * p + p, ra * (p * p + p)), (rb, 2, 2 * rb),
                                 cfg.sketch_rows, cfg.seeds,
                                 note="synthetic tables' sizes" + (" (stand-in: the CSV tables' rows and columns "
                                                                   "decide)" if r.features_csv else "")))
    return stages
