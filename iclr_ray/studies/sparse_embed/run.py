"""sparse_embed on Ray. The data sets go into the object store once; each embedding is a Ray task,
and every all-pairs distance check (of the inputs and of each embedding) is split into tasks of
``pairs_per_task`` pairs, so |X| = 10^4 (5e7 pairs) spreads over a cluster. The birthday-paradox
and compressed-sensing sweeps are one task per sparsity s."""
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
    """The data sets, read (docword / npz) or generated, before Ray starts: a bad file exits 2."""
    v = cfg.vectors
    if v.docword is not None:
        X, source = data.load_docword(v.docword, max_docs=v.n), f"docword {v.docword.name}"
    elif v.npz is not None:
        X, source = data.load_npz(v.npz, max_rows=v.n), f"npz {v.npz.name}"
    else:
        X, source = data.random_sparse(v.n, v.d, v.s, cfg.seed, clusters=v.clusters), "generated"
    s = data.sparsity(X)
    if max(cfg.cs.s_values) > cfg.cs.d:
        raise ConfigError(f"cs.s_values: {max(cfg.cs.s_values)} non-zeros do not fit in cs.d = {cfg.cs.d}")
    if cfg.cs.m_min > cfg.cs.m_max:
        raise ConfigError(f"cs.m_min = {cfg.cs.m_min} exceeds cs.m_max = {cfg.cs.m_max}")
    if max(cfg.birthday.s_values) > cfg.vectors.d:
        raise ConfigError(f"birthday.s_values: {max(cfg.birthday.s_values)} does not fit in vectors.d = {cfg.vectors.d}")
    Xinf = data.random_sparse(max(cfg.linf.sizes), X.shape[1], s, cfg.seed + 1) if s <= X.shape[1] else X
    return {"X": X, "Xinf": Xinf, "source": source}


@ray.remote(num_cpus=1)
def embed_task(X: sp.csr_matrix, spec) -> sp.csr_matrix:
    return spec.embed(X)


@ray.remote(num_cpus=1)
def distance_task(F: sp.csr_matrix, ia: np.ndarray, ib: np.ndarray, ps: tuple, group_size: int | None) -> dict:
    return geometry.pair_distances(F, ia, ib, ps, group_size)


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

    def submit(self, key, F, n: int, ps: tuple, group_size: int | None = None) -> None:
        ia, ib = geometry.all_pairs(n)
        self.parts[key] = []
        for lo in range(0, ia.size, self.chunk):
            self.parts[key].append(len(self.refs))
            self.refs.append(distance_task.remote(F, ia[lo:lo + self.chunk], ib[lo:lo + self.chunk], ps, group_size))

    def gather(self, ctx: RunContext, desc: str) -> dict:
        outs = ctx.wait_all(self.refs, desc)
        return {key: {p: np.concatenate([outs[i][p] for i in idx]) for p in outs[idx[0]]}
                for key, idx in self.parts.items()}


def lp_experiment(ctx: RunContext, cfg: Config, X: sp.csr_matrix) -> dict[str, Any]:
    """Max-pooling (and the linear map of the same shape) on X over the eps grid; the signed
    control; the exact-l_inf map on X for the downstream tasks."""
    n, d, s = X.shape[0], X.shape[1], data.sparsity(X)
    ps = tuple(float(p) for p in cfg.lp.ps) + (INF,)
    S = data.signed(X, cfg.seed + 7)
    Xr, Sr = ray.put(X), ray.put(S)
    checks = Checks(cfg.pairs_per_task)
    checks.submit("orig", Xr, n, ps)
    checks.submit("orig_signed", Sr, n, ps)
    cells = {}
    methods = [("maxpool", embeddings.MaxPool)] + ([("linear", embeddings.CountSketch)] if cfg.lp.linear_baseline else [])
    for seed in range(cfg.lp.seeds):
        for eps in cfg.lp.eps:
            m, t = embeddings.lp_dims(s, n, eps, cfg.lp.c_m, cfg.lp.c_t)
            for name, cls in methods:
                key = (name, eps, seed)
                cells[key] = (m, t)
                checks.submit(key, embed_task.remote(Xr, cls(d, m, t, cfg.seed * 1000 + seed)), n, ps, m)
    m_inf = max(1, math.ceil(cfg.linf.m_factor * s))
    t_inf = embeddings.linf_reps(s, n, m_inf, cfg.linf.delta)
    exact_map = embeddings.MaxPool(d, m_inf, t_inf, cfg.seed * 1000)
    checks.submit("linf_map", embed_task.remote(Xr, exact_map), n, ps, m_inf)
    eps_min = min(cfg.lp.eps)
    m_s, t_s = embeddings.lp_dims(s, n, eps_min, cfg.lp.c_m, cfg.lp.c_t)
    checks.submit("signed", embed_task.remote(Sr, embeddings.MaxPool(d, m_s, t_s, cfg.seed * 1000)), n, ps, m_s)
    got = checks.gather(ctx, f"l_p: {len(cells) + 4} all-pairs checks of {n * (n - 1) // 2} pairs")

    true = {p: geometry.norms(got["orig"])[p] for p in ps}
    rows = []
    for (name, eps, seed), (m, t) in cells.items():
        for p in ps:
            est = embeddings.estimate(got[(name, eps, seed)][p], p)
            rec = {"method": name, "eps": eps, "seed": seed, "m": m, "t": t, "dims": m * t, "p": measure.plabel(p),
                   **measure.distortion(measure.ratios(est, true[p])),
                   "exact_fraction": measure.exact_fraction(est, true[p])}
            ctx.log(experiment="lp", **rec)
            rows.append(rec)
    true_s = {p: geometry.norms(got["orig_signed"])[p] for p in ps}
    signed = {"m": m_s, "t": t_s, "eps": eps_min, "by_p": []}
    for p in ps:
        est = embeddings.estimate(got["signed"][p], p)
        signed["by_p"].append({"p": measure.plabel(p), **measure.distortion(measure.ratios(est, true_s[p])),
                               "exact_fraction": measure.exact_fraction(est, true_s[p])})
    estimates = {("linf_map", p): embeddings.estimate(got["linf_map"][p], p) for p in ps}
    for (name, eps, seed) in cells:
        if seed == 0:
            estimates.update({((name, eps), p): embeddings.estimate(got[(name, eps, seed)][p], p) for p in ps})
    down = downstream(true, estimates, n, max(cfg.vectors.clusters, 2))
    return {"rows": rows, "signed": signed, "downstream": down,
            "linf_map": {"m": m_inf, "t": t_inf, "exact_fraction": measure.exact_fraction(estimates[("linf_map", INF)], true[INF])}}


def downstream(true: dict, estimates: dict, n: int, k: int) -> dict[str, list[dict]]:
    """Diameter and k-center (Gonzalez) computed on embedded distances, judged in the original
    metric: relative diameter error, and the k-center cost of the embedded run's centers over
    the cost of the centers the same algorithm picks on the true distances."""
    diam, kc = [], []
    for (which, p), est in estimates.items():
        label = {"map": "maxpool_linf", "eps": None} if which == "linf_map" else {"map": which[0], "eps": which[1]}
        true_diam, _ = geometry.diameter(true[p])
        est_diam, _ = geometry.diameter(est)
        diam.append({**label, "p": measure.plabel(p), "true": true_diam, "embedded": est_diam,
                     "rel_error": abs(est_diam - true_diam) / true_diam if true_diam > 0 else float("nan")})
        D, De = geometry.square(true[p], n), geometry.square(est, n)
        c_true, c_emb = geometry.k_center(D, k), geometry.k_center(De, k)
        cost_true = geometry.k_center_cost(D, c_true)
        kc.append({**label, "p": measure.plabel(p), "k": k, "cost_ratio": geometry.k_center_cost(D, c_emb) / cost_true if cost_true > 0 else float("nan"),
                   "same_centers": bool(np.array_equal(c_true, c_emb))})
    return {"diameter": diam, "k_center": kc}


def linf_experiment(ctx: RunContext, cfg: Config, Xall: sp.csr_matrix) -> list[dict[str, Any]]:
    """Exact l_inf on |X| = each size: the share of pairs exact for t = 1..t_pred + extra, the
    smallest exact t per seed, and the linear map at the predicted size."""
    d, s = Xall.shape[1], data.sparsity(Xall)
    m = max(1, math.ceil(cfg.linf.m_factor * s))
    checks, cells = Checks(cfg.pairs_per_task), {}
    for size in cfg.linf.sizes:
        Xr = ray.put(Xall[:size])
        checks.submit(("orig", size), Xr, size, (INF,))
        t_pred = embeddings.linf_reps(s, size, m, cfg.linf.delta)
        for seed in range(cfg.linf.seeds):
            key_seed = cfg.seed * 1000 + 100 + seed
            cells[(size, seed)] = t_pred
            checks.submit(("maxpool", size, seed),
                          embed_task.remote(Xr, embeddings.MaxPool(d, m, t_pred + cfg.linf.extra_reps, key_seed)), size, (INF,), m)
            checks.submit(("linear", size, seed), embed_task.remote(Xr, embeddings.CountSketch(d, m, t_pred, key_seed)), size, (INF,))
    got = checks.gather(ctx, f"l_inf: exactness on |X| = {cfg.linf.sizes}, {cfg.linf.seeds} seeds each")
    rows = []
    for (size, seed), t_pred in cells.items():
        true = got[("orig", size)][INF][:, 0]
        frac = measure.exact_by_reps(got[("maxpool", size, seed)][INF], true)
        lin = got[("linear", size, seed)][INF][:, 0]
        rec = {"size": size, "seed": seed, "pairs": int(true.size), "m": m, "t_pred": t_pred,
               "exact_by_t": frac.tolist(), "exact_at_pred": bool(frac[t_pred - 1] == 1.0),
               "t_min": measure.smallest_exact_t(frac), "linear_exact_fraction": measure.exact_fraction(lin, true),
               "linear_max_ratio": float(measure.ratios(lin, true).max())}
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
    metrics: dict[str, Any] = {"data": {"source": inputs["source"], "n": X.shape[0], "d": X.shape[1],
                                        "s": data.sparsity(X), "nnz": int(X.nnz),
                                        "memory_mb": (X.data.nbytes + X.indices.nbytes + X.indptr.nbytes) / 2**20}}
    metrics["lp"] = lp_experiment(ctx, cfg, X)
    metrics["linf"] = linf_experiment(ctx, cfg, Xinf)
    metrics.update(average_case(ctx, cfg))
    return metrics
