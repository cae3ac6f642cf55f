"""sparse_embed on Ray. The data sets go into the object store once; each embedding (one per map,
eps and seed) is a Ray task, and every all-pairs distance check (of the inputs and of each
embedding) is split into tasks of ``pairs_per_task`` pairs that hand back per-pair estimates, so
|X| = 10^4 (5e7 pairs) spreads over a cluster. The birthday-paradox and compressed-sensing sweeps
are one task per sparsity s."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray
import scipy.sparse as sp

from ...config import ConfigError
from ...runtime import RunContext
from . import data, embeddings, geometry, measure
from .config import Config

INF = math.inf


def prepare(cfg: Config) -> dict[str, Any]:
    """The data sets, read (reviews / docword / npz) or generated, before Ray starts: a bad file
    exits 2."""
    v = cfg.vectors
    if v.docword is not None:
        X, source = data.load_docword(v.docword, max_docs=v.n), f"docword {v.docword.name}"
    elif v.npz is not None:
        X, source = data.load_npz(v.npz, max_rows=v.n), f"npz {v.npz.name}"
    elif v.source == "reviews":
        X, source = data.reviews_bag_of_words(v.n), "reviews (bag of words)"
    else:
        X, source = data.random_sparse(v.n, v.d, v.s, cfg.seed, clusters=v.clusters), "generated"
    if max(cfg.cs.s_values) > cfg.cs.d:
        raise ConfigError(f"cs.s_values: {max(cfg.cs.s_values)} non-zeros do not fit in cs.d = {cfg.cs.d}")
    if cfg.cs.m_min > cfg.cs.m_max:
        raise ConfigError(f"cs.m_min = {cfg.cs.m_min} exceeds cs.m_max = {cfg.cs.m_max}")
    if max(cfg.birthday.s_values) > cfg.vectors.d:
        raise ConfigError(f"birthday.s_values: {max(cfg.birthday.s_values)} does not fit in vectors.d = {cfg.vectors.d}")
    if cfg.linf.s > cfg.vectors.d:
        raise ConfigError(f"linf.s = {cfg.linf.s} non-zeros do not fit in vectors.d = {cfg.vectors.d}")
    Xinf = data.random_sparse(max(cfg.linf.sizes), cfg.vectors.d, cfg.linf.s, cfg.seed + 1)
    return {"X": X, "Xinf": Xinf, "source": source}


@ray.remote(num_cpus=1)
def embed_task(X: sp.csr_matrix, spec) -> sp.csr_matrix:
    return spec.embed(X)


@ray.remote(num_cpus=1)
def distance_task(F: sp.csr_matrix, ia: np.ndarray, ib: np.ndarray, ps: tuple, group_size: int | None,
                  first_max: bool) -> dict:
    """Per pair: the distances (inputs: ``group_size`` None) or the embedding's estimates from all
    its repetitions; with ``first_max``, also the first repetition attaining the l_inf estimate.
    Reduced here, so what travels back is a few numbers per pair, not one per repetition."""
    per = geometry.pair_distances(F, ia, ib, ps, group_size)
    if group_size is None:
        return geometry.norms(per)
    out: dict = {p: embeddings.estimate(v, p) for p, v in per.items()}
    if first_max:
        out["first_max"] = per[INF].argmax(axis=1)
    return out


@ray.remote(num_cpus=1)
def birthday_task(s: int, d: int, ratios: list[float], vectors: int, seed: int) -> list[dict]:
    X = data.random_sparse(vectors, d, s, seed)
    m_values = sorted({max(1, round(r * s * s)) for r in ratios})
    return [{"s": s, "ratio": r["m"] / s**2, **r} for r in measure.birthday(X, m_values, seed + 1)]


@ray.remote(num_cpus=1)
def cs_task(s: int, cs: dict, seed: int) -> list[dict]:
    rows = measure.cs_recovery(s, cs["d"], cs["m_min"], cs["m_max"], cs["vectors"], cs["tolerance"], seed)
    return [{"s": s, **r} for r in rows]


@dataclass
class Checks:
    """All-pairs distance checks submitted as Ray tasks, gathered together (one progress bar)."""

    chunk: int
    refs: list = field(default_factory=list)
    parts: dict = field(default_factory=dict)

    def submit(self, key, F, n: int, ps: tuple, group_size: int | None = None, first_max: bool = False) -> None:
        ia, ib = geometry.all_pairs(n)
        self.parts[key] = []
        for lo in range(0, ia.size, self.chunk):
            self.parts[key].append(len(self.refs))
            self.refs.append(distance_task.remote(F, ia[lo:lo + self.chunk], ib[lo:lo + self.chunk], ps, group_size,
                                                  first_max))

    def gather(self, ctx: RunContext, desc: str) -> dict:
        outs = ctx.wait_all(self.refs, desc)
        return {key: {p: np.concatenate([outs[i][p] for i in idx]) for p in outs[idx[0]]}
                for key, idx in self.parts.items()}


def map_seed(cfg: Config, seed: int) -> int:
    """The hash seed of the map with index ``seed`` (the same map for every eps and method)."""
    return cfg.seed * 1000 + seed


def lp_experiment(ctx: RunContext, cfg: Config, X: sp.csr_matrix) -> dict[str, Any]:
    """Per seed of the map: max-pooling (and the linear map of the same shape) on X over the eps
    grid, the signed control (X with fresh random signs), and the exact-l_inf map for the
    downstream tasks."""
    n, d, s = X.shape[0], X.shape[1], data.sparsity(X)
    ps = tuple(float(p) for p in cfg.lp.ps) + (INF,)
    Xr = ray.put(X)
    checks = Checks(cfg.pairs_per_task)
    checks.submit("orig", Xr, n, ps)
    cells = {}
    methods = [("maxpool", embeddings.MaxPool)] + ([("linear", embeddings.CountSketch)] if cfg.lp.linear_baseline else [])
    m_inf = max(1, math.ceil(cfg.linf.m_factor * s))
    t_inf = embeddings.linf_reps(s, n, m_inf, cfg.linf.delta)
    # the signed control at the largest eps (the cheapest map): a bucket whose support entries are
    # all negative reads 0 whatever m and t are, so the failure does not depend on the size
    eps_s = max(cfg.lp.eps)
    m_s, t_s = embeddings.lp_dims(s, n, eps_s, cfg.lp.c_m, cfg.lp.c_t)
    for seed in range(cfg.lp.seeds):
        for eps in cfg.lp.eps:
            m, t = embeddings.lp_dims(s, n, eps, cfg.lp.c_m, cfg.lp.c_t)
            for name, cls in methods:
                cells[(name, eps, seed)] = (m, t)
                checks.submit((name, eps, seed), embed_task.remote(Xr, cls(d, m, t, map_seed(cfg, seed))), n, ps, m)
        checks.submit(("linf_map", seed), embed_task.remote(Xr, embeddings.MaxPool(d, m_inf, t_inf, map_seed(cfg, seed))),
                      n, (INF,), m_inf)
        Sr = ray.put(data.signed(X, cfg.seed + 7 + seed))  # fresh signs with every map
        checks.submit(("orig_signed", seed), Sr, n, ps)
        checks.submit(("signed", seed), embed_task.remote(Sr, embeddings.MaxPool(d, m_s, t_s, map_seed(cfg, seed))),
                      n, ps, m_s)
    got = checks.gather(ctx, f"l_p: {len(checks.parts)} all-pairs checks of {n * (n - 1) // 2} pairs "
                             f"({cfg.lp.seeds} seeds of the map)")

    true = got["orig"]
    rows, signed, linf_map = [], [], []
    for (name, eps, seed), (m, t) in cells.items():
        for p in ps:
            rec = measure.lp_row(name, eps, seed, m, t, p, got[(name, eps, seed)][p], true[p])
            ctx.log(experiment="lp", **rec)
            rows.append(rec)
    for seed in range(cfg.lp.seeds):
        true_s = got[("orig_signed", seed)]
        signed += [measure.lp_row("maxpool", eps_s, seed, m_s, t_s, p, got[("signed", seed)][p], true_s[p]) for p in ps]
        linf_map.append({"seed": seed, "exact_fraction": measure.exact_fraction(got[("linf_map", seed)][INF], true[INF])})
    estimates = {key: got[key] for key in cells}
    estimates.update({("maxpool_linf", None, seed): got[("linf_map", seed)] for seed in range(cfg.lp.seeds)})
    down = measure.downstream(true, estimates, n, max(cfg.vectors.clusters, 2))
    return {"rows": rows, "signed": {"m": m_s, "t": t_s, "eps": eps_s, "rows": signed}, "downstream": down,
            "linf_map": {"m": m_inf, "t": t_inf, "seeds": linf_map}}


def linf_experiment(ctx: RunContext, cfg: Config, Xall: sp.csr_matrix) -> list[dict[str, Any]]:
    """Exact l_inf on |X| = each size: the share of pairs exact for t = 1..t_pred + extra, the
    smallest exact t per seed, and the linear map at the predicted size. Seed k is the same map
    at every size, and the sets are nested (the first |X| vectors)."""
    d, s = Xall.shape[1], data.sparsity(Xall)
    m = max(1, math.ceil(cfg.linf.m_factor * s))
    checks, cells = Checks(cfg.pairs_per_task), {}
    for size in cfg.linf.sizes:
        Xr = ray.put(Xall[:size])
        checks.submit(("orig", size), Xr, size, (INF,))
        t_pred = embeddings.linf_reps(s, size, m, cfg.linf.delta)
        for seed in range(cfg.linf.seeds):
            key_seed = map_seed(cfg, 100 + seed)
            cells[(size, seed)] = t_pred
            checks.submit(("maxpool", size, seed),
                          embed_task.remote(Xr, embeddings.MaxPool(d, m, t_pred + cfg.linf.extra_reps, key_seed)),
                          size, (INF,), m, first_max=True)
            checks.submit(("linear", size, seed), embed_task.remote(Xr, embeddings.CountSketch(d, m, t_pred, key_seed)),
                          size, (INF,), m)
    got = checks.gather(ctx, f"l_inf: exactness on |X| = {cfg.linf.sizes}, {cfg.linf.seeds} seeds each")
    rows = []
    for (size, seed), t_pred in cells.items():
        mp = got[("maxpool", size, seed)]
        rec = measure.linf_row(size, seed, m, t_pred, mp[INF], mp["first_max"], t_pred + cfg.linf.extra_reps,
                               got[("orig", size)][INF], got[("linear", size, seed)][INF])
        ctx.log(experiment="linf", **{k: v for k, v in rec.items() if k != "exact_by_t"})
        rows.append(rec)
    return rows


def average_case(ctx: RunContext, cfg: Config) -> dict[str, list[dict]]:
    b, cs = cfg.birthday, cfg.cs
    refs = [birthday_task.remote(s, cfg.vectors.d, b.ratios, b.vectors, cfg.seed + 11 * s) for s in b.s_values]
    refs += [cs_task.remote(s, cs.model_dump(), cfg.seed + 13 * s) for s in cs.s_values]
    outs = ctx.wait_all(refs, f"average case: birthday map for s = {b.s_values}, compressed sensing for s = {cs.s_values}")
    bd = [r for out in outs[:len(b.s_values)] for r in out]
    cr = [r for out in outs[len(b.s_values):] for r in out]
    for r in bd:
        ctx.log(experiment="birthday", **r)
    for r in cr:
        ctx.log(experiment="cs", **r)
    return {"birthday": bd, "cs": cr}


def run(cfg: Config, ctx: RunContext) -> dict[str, Any]:
    inputs = ctx.inputs
    X, Xinf = inputs["X"], inputs["Xinf"]
    n, d = X.shape
    metrics: dict[str, Any] = {"data": {"source": inputs["source"], "n": n, "d": d, "s": data.sparsity(X),
                                        "nnz": int(X.nnz), "mean_nnz": X.nnz / n, "density": X.nnz / (n * d),
                                        "max_value": float(X.data.max()),
                                        "memory_mb": (X.data.nbytes + X.indices.nbytes + X.indptr.nbytes) / 2**20}}
    metrics["lp"] = lp_experiment(ctx, cfg, X)
    metrics["linf"] = linf_experiment(ctx, cfg, Xinf)
    metrics.update(average_case(ctx, cfg))
    return metrics


# ----------------------------------------------------------------------------- plan


REVIEWS_SHAPE = (14_145, 75)
"""(d, s) of the review bag of words: the vocabulary of the whole corpus and the longest of the
first 300 reviews (docs/studies/sparse_embed.md); the run reads s from the data"""
TASK_BASE_BYTES = 200 * 2**20
"""a Ray worker process with numpy and scipy imported, before any array"""


def _embed_bytes(nnz: int, t: int) -> float:
    """embed_task: every entry of X in each of t repetitions as (row, column, value), concatenated,
    keyed, sorted (~80 bytes an entry), and the CSR result (12)."""
    return TASK_BASE_BYTES + 92.0 * nnz * t


def _check_bytes(nnz: int, pairs: int, groups: int, n_ps: int) -> float:
    """distance_task: its copy of the matrix and the per-entry row/column/group indices (~60 bytes
    an entry), the (pairs, groups) result per p, the dense column block (2^22 doubles) and the
    temporaries of a run of 2^22 visited entries (~8 arrays)."""
    return TASK_BASE_BYTES + 60.0 * nnz + 8.0 * pairs * groups * n_ps + 9 * 8 * 2**22


def plan(cfg: Config) -> list:
    """The three experiments, each a batch of Ray tasks: embeddings (one per map, eps and seed) and
    all-pairs checks in chunks of ``pairs_per_task``, as :func:`lp_experiment` and
    :func:`linf_experiment` submit them; then one task per s of the birthday and compressed-sensing
    sweeps. Matrices are counted at n x s entries (an upper bound: s is the longest row)."""
    import math

    from ...plan import Tasks

    v, lp, li, b, cs = cfg.vectors, cfg.lp, cfg.linf, cfg.birthday, cfg.cs
    file = v.docword is not None or v.npz is not None
    d, s = (v.d, v.s) if v.source == "generated" or file else REVIEWS_SHAPE
    n, chunk = v.n, cfg.pairs_per_task
    per_check = math.ceil(n * (n - 1) / 2 / chunk)
    pairs = min(chunk, n * (n - 1) // 2)
    methods = 1 + lp.linear_baseline
    t_max = embeddings.lp_dims(s, n, min(lp.eps), lp.c_m, lp.c_t)[1]
    m_inf = max(1, math.ceil(li.m_factor * s))
    t_inf = embeddings.linf_reps(s, n, m_inf, li.delta)
    embeds = lp.seeds * (len(lp.eps) * methods + 2)  # + the exact-l_inf map and the signed control
    checks = 1 + lp.seeds * (len(lp.eps) * methods + 3)  # + those two and the signed inputs
    n_ps = len(lp.ps) + 1
    mem = max(_embed_bytes(n * s, max(t_max, t_inf)), _check_bytes(n * s * max(t_max, t_inf), pairs,
                                                                      max(t_max, t_inf), n_ps))
    where = "the data's sizes unknown until the file is read: vectors.s assumed" if file else \
        f"d = {d:,}, s = {s} (the review corpus, docs/studies/sparse_embed.md)" if v.source == "reviews" else \
        f"d = {d:,}, s = {s}"
    stages = [Tasks("l_p", None, embeds + checks * per_check, mem,
                    note=f"{embeds} embeddings + {checks} all-pairs checks x {per_check} tasks of <= {chunk:,} of the "
                         f"{n * (n - 1) // 2:,} pairs; |X| = {n:,}, {where}; the largest map t = {max(t_max, t_inf)} "
                         f"repetitions, {n_ps} p's")]
    m = max(1, math.ceil(li.m_factor * li.s))
    tasks, mem = 0, 0.0
    for size in li.sizes:
        t = embeddings.linf_reps(li.s, size, m, li.delta) + li.extra_reps
        per = math.ceil(size * (size - 1) / 2 / chunk)
        tasks += 2 * li.seeds + (1 + 2 * li.seeds) * per
        mem = max(mem, _embed_bytes(size * li.s, t), _check_bytes(size * li.s * t, min(chunk, size * (size - 1) // 2),
                                                                   t, 2))
    stages.append(Tasks("l_inf", None, tasks, mem,
                        note=f"|X| = {li.sizes}, {li.seeds} maps each (max-pooling and linear): embeddings and "
                             f"all-pairs l_inf checks; m = {m}"))
    cs_bytes = 3 * 8.0 * cs.m_max * cs.d + 8.0 * cs.vectors * cs.d  # A, NNLS's copy and A x; X dense
    bd_bytes = 100.0 * b.vectors * max(b.s_values)
    stages.append(Tasks("average case", None, len(b.s_values) + len(cs.s_values),
                        TASK_BASE_BYTES + max(cs_bytes, bd_bytes),
                        note=f"one task per s: the birthday map ({b.vectors:,} vectors) and compressed sensing "
                             f"(dense {cs.m_max:,} x {cs.d:,} Gaussian A at the largest m, held with NNLS's copy)"))
    return stages
