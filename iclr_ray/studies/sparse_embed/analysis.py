"""sparse_embed claims and report tables: pure functions of the metrics (so `iclr-ray report`
re-renders them from result.json alone)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...claims import Claim
from ...markdown import table
from .config import Config
from .measure import loglog_slope, m_at

EXACT_TOL = 1e-12


def _worst(rows: list[dict], method: str, field: str, how=max) -> dict[float, float]:
    """Per eps: the worst value of ``field`` over seeds and finite p."""
    out: dict[float, list[float]] = {}
    for r in rows:
        if r["method"] == method and r["p"] != "inf" and r[field] is not None:
            out.setdefault(r["eps"], []).append(r[field])
    return {eps: how(v) for eps, v in sorted(out.items())}


def eps_ratio(rows: list[dict], method: str = "maxpool") -> float:
    """max over eps of (worst distortion over pairs, seeds and finite p) / eps: <= 1 when every
    distance is within 1 +- eps."""
    worst = _worst(rows, method, "distortion")
    return max(w / eps for eps, w in worst.items()) if worst else float("nan")


def distortion_slope(rows: list[dict], method: str = "maxpool", p: str = "1") -> float:
    """Log-log slope of the worst distortion against the embedding's dimension m t (the bound
    m t ~ 1/eps^2 at fixed s, |X| says -1/2)."""
    pts: dict[int, float] = {}
    for r in rows:
        if r["method"] == method and r["p"] == p and r["distortion"] is not None:
            pts[r["dims"]] = max(pts.get(r["dims"], 0.0), r["distortion"])
    return loglog_slope(list(pts), list(pts.values()))


def max_ratio(rows: list[dict], method: str, p: str | None = None) -> float:
    vals = [r["max_ratio"] for r in rows if r["method"] == method and (p is None or r["p"] == p)
            and r["max_ratio"] is not None]
    return max(vals) if vals else float("nan")


def t_min_by_size(linf: list[dict]) -> dict[int, float]:
    """Median over seeds of the smallest exact t (inf when a seed never was)."""
    out: dict[int, list[float]] = {}
    for r in linf:
        out.setdefault(r["size"], []).append(math.inf if r["t_min"] is None else r["t_min"])
    return {size: float(np.median(v)) for size, v in sorted(out.items())}


def log_law_spread(linf: list[dict]) -> float:
    """max / min over |X| of median t_min / ln(pairs): about 1 when the repetitions exact l_inf
    needs grow like log |X|; a t that did not grow would give ln(pairs_max)/ln(pairs_min)."""
    tm = t_min_by_size(linf)
    pairs = {r["size"]: r["pairs"] for r in linf}
    per = [tm[n] / math.log(pairs[n]) for n in tm if pairs[n] > 1]
    return max(per) / min(per) if per and min(per) > 0 else float("nan")


def m99(rows: list[dict], field: str) -> dict[int, float]:
    return {s: m_at([r for r in rows if r["s"] == s], field) for s in sorted({r["s"] for r in rows})}


def claims(metrics: dict[str, Any], cfg: Config) -> list[Claim]:
    lp = metrics["lp"]
    rows = lp["rows"]
    linf = metrics["linf"]
    n = metrics["data"]["n"]
    lin_max2 = max_ratio(rows, "linear", "2")
    at_pred = [r["exact_at_pred"] for r in linf]
    spread_if_flat = math.log(max(r["pairs"] for r in linf)) / math.log(max(min(r["pairs"] for r in linf), 2))
    signed_inf = next(r for r in lp["signed"]["by_p"] if r["p"] == "inf")
    bd = metrics["birthday"]
    bd99, cs99 = m99(bd, "measured"), m99(metrics["cs"], "recovered")
    bd_dev = max(abs(r["measured"] - r["predicted"]) for r in bd)
    diam = lp["downstream"]["diameter"]
    diam_inf = [r["rel_error"] for r in diam if r["map"] == "maxpool_linf" and r["p"] == "inf"]
    diam_lp = [r["rel_error"] / r["eps"] for r in diam if r["map"] == "maxpool" and r["p"] != "inf"]
    kc_inf = [r for r in lp["downstream"]["k_center"] if r["map"] == "maxpool_linf" and r["p"] == "inf"]
    kc_l1 = [r["cost_ratio"] for r in lp["downstream"]["k_center"] if r["map"] == "maxpool" and r["p"] == "1"]
    worst_lin = eps_ratio(rows, "linear") if any(r["method"] == "linear" for r in rows) else float("nan")
    return [
        Claim.at_most("lp_within_eps",
                      "Non-negative s-sparse vectors: a non-linear map to O(s log(|X| s)/ε²) dimensions keeps every "
                      "pairwise ℓ_p distance within 1 ± ε, for every p ≥ 1 at once",
                      eps_ratio(rows), 1.0,
                      note=f"max over ε ∈ {sorted({r['eps'] for r in rows})}, p ∈ {cfg.lp.ps}, {n * (n - 1) // 2} pairs and "
                           f"seeds of worst distortion / ε; m = {cfg.lp.c_m:g}s/ε, t = {cfg.lp.c_t:g}·ln(|X|s)/ε; "
                           f"linear map of the same shape: {worst_lin:.3g}"),
        Claim.within("lp_dims_law",
                     "The dimension the ℓ_p guarantee needs grows like 1/ε² (distortion ~ dimension^(-1/2))",
                     distortion_slope(rows), -0.75, -0.35, note="log-log slope of worst ℓ_1 distortion vs m·t"),
        Claim.at_most("one_sided",
                      "On non-negative inputs the max-pooling estimate never exceeds the true distance (our derivation: "
                      "a bucket's max is 1-Lipschitz)",
                      max_ratio(rows, "maxpool"), 1.0 + 1e-9,
                      note=f"largest estimate / true over all p, ε, pairs; the linear map's ℓ_2: {lin_max2:.4g}"),
        Claim.at_least("linf_exact",
                       "ℓ_∞ distances are preserved exactly with O(s log|X|) dimensions",
                       float(np.mean(at_pred)), 1.0 - cfg.linf.delta,
                       note=f"share of (|X|, seed) runs with every pair exact at m = {cfg.linf.m_factor:g}s, "
                            f"t = ⌈log(pairs/δ)/log(1/q)⌉; |X| ∈ {cfg.linf.sizes}"),
        Claim.at_most("linf_log_tight",
                      "The O(s log|X|) dimension for exact ℓ_∞ is tight: the repetitions needed grow like log|X|",
                      log_law_spread(linf), 1.5,
                      note=f"max/min over |X| of median smallest exact t / ln(pairs); t_min = {t_min_by_size(linf)}; "
                           f"a t that did not grow would give {spread_if_flat:.2f}"),
        Claim.at_most("linear_not_exact",
                      "Non-linearity is necessary: a linear map of the same size does not preserve ℓ_∞",
                      float(np.mean([r["linear_exact_fraction"] for r in linf])), 0.5,
                      note="share of pairs whose ℓ_∞ distance CountSketch reproduces exactly at the exact map's size"),
        Claim.at_least("signed_fails",
                       "Non-negativity is necessary: on signed vectors the same map loses distances",
                       1.0 - signed_inf["min_ratio"], 0.5,
                       note=f"1 − worst ℓ_∞ ratio on the data with random signs (m = {lp['signed']['m']}, "
                            f"t = {lp['signed']['t']}); exact pairs: {signed_inf['exact_fraction']:.3f}"),
        Claim.at_most("birthday_curve",
                      "Average case: the linear birthday-paradox map keeps a vector's norm exactly when its support "
                      "hashes without collision, Π_{i<s}(1 − i/m)",
                      bd_dev, 0.05, note="largest |measured − predicted| share over s and m (ℓ_1, ℓ_2, ℓ_∞ all exact)"),
        Claim.within("birthday_s_squared",
                     "99% of vectors exactly preserved needs m = Θ(s²) for the linear map",
                     loglog_slope(list(bd99), list(bd99.values())), 1.7, 2.3,
                     note=f"log-log slope of m_99 vs s; m_99 = {({s: round(v) for s, v in bd99.items() if math.isfinite(v)})}"),
        Claim.at_most("cs_beats_s_squared",
                      "A non-smooth (compressed-sensing) decoder needs only O(s log d) measurements",
                      loglog_slope(list(cs99), list(cs99.values())), 1.5,
                      note=f"log-log slope of NNLS's m_99 vs s; m_99 = {({s: round(v) for s, v in cs99.items() if math.isfinite(v)})}, "
                           f"d = {cfg.cs.d}"),
        Claim.at_most("diameter_exact_linf",
                      "Downstream: the ℓ_∞ diameter computed on the embedding is exact",
                      max(diam_inf) if diam_inf else float("nan"), EXACT_TOL, note="relative error"),
        Claim.at_most("diameter_lp",
                      "Downstream: the ℓ_p diameter computed on the embedding is within 1 ± ε",
                      max(diam_lp) if diam_lp else float("nan"), 1.0, note="max over p, ε of relative error / ε"),
        Claim.at_least("k_center_linf_same",
                       "Downstream: k-center on the exact ℓ_∞ embedding picks the same centers",
                       float(np.mean([r["same_centers"] for r in kc_inf])) if kc_inf else float("nan"), 1.0,
                       note=f"Gonzalez, k = {kc_inf[0]['k'] if kc_inf else '?'}; ℓ_1 on the max-pooling map: "
                            f"cost ratio {max(kc_l1) if kc_l1 else float('nan'):.3f} at worst"),
    ]


def report_md(metrics: dict[str, Any], cfg: Config) -> str:
    d = metrics["data"]
    agg: dict[tuple, dict] = {}
    for r in metrics["lp"]["rows"]:
        key = (r["method"], r["eps"], r["p"])
        a = agg.setdefault(key, {**r})
        a["min_ratio"] = min(a["min_ratio"], r["min_ratio"])
        a["max_ratio"] = max(a["max_ratio"], r["max_ratio"])
        a["distortion"] = max(a["distortion"], r["distortion"])
    sg = metrics["lp"]["signed"]
    linf = []
    for size in sorted({r["size"] for r in metrics["linf"]}):
        rs = [r for r in metrics["linf"] if r["size"] == size]
        linf.append([str(size), str(rs[0]["pairs"]), str(rs[0]["m"]), str(rs[0]["t_pred"]),
                     ", ".join(str(r["t_min"]) for r in rs), f"{sum(r['exact_at_pred'] for r in rs)}/{len(rs)}",
                     f"{np.mean([r['linear_exact_fraction'] for r in rs]):.3f}"])
    bd99, cs99 = m99(metrics["birthday"], "measured"), m99(metrics["cs"], "recovered")
    down = metrics["lp"]["downstream"]
    lines = ["## Measurements", "",
             f"Data: {d['source']}, |X| = {d['n']} vectors in d = {d['d']:,}, s = {d['s']} "
             f"({d['nnz']} non-zeros, {d['memory_mb']:.2f} MiB in memory).", "",
             "### ℓ_p: worst distortion over all pairs (max over seeds)", "",
             table(["map", "ε", "m", "t", "m·t", "p", "min ratio", "max ratio", "distortion"],
                   [[method, f"{eps:g}", str(a["m"]), str(a["t"]), f"{a['dims']:,}", p, f"{a['min_ratio']:.4f}",
                     f"{a['max_ratio']:.6f}", f"{a['distortion']:.4f}"] for (method, eps, p), a in agg.items()]),
             "", f"Signed control (m = {sg['m']}, t = {sg['t']}): "
             + ", ".join(f"p = {r['p']}: ratios [{r['min_ratio']:.3f}, {r['max_ratio']:.3f}]" for r in sg["by_p"]), "",
             "### Exact ℓ_∞", "",
             table(["|X|", "pairs", "m", "predicted t", "smallest exact t (per seed)", "exact at predicted t",
                    "linear: exact share"], linf),
             "", "### Average case: m for 99% exact", "",
             table(["s", "s²", "birthday map m_99", "NNLS m_99"],
                   [[str(s), str(s * s), f"{bd99.get(s, float('nan')):.0f}", f"{cs99.get(s, float('nan')):.0f}"]
                    for s in sorted(set(bd99) | set(cs99))]),
             "", "### Downstream", "",
             table(["map", "ε", "p", "diameter rel. error", "k-center cost ratio", "same centers"],
                   [[dm["map"], "" if dm["eps"] is None else f"{dm['eps']:g}", dm["p"], f"{dm['rel_error']:.2e}",
                     f"{kc['cost_ratio']:.4f}", str(kc["same_centers"])]
                    for dm, kc in zip(down["diameter"], down["k_center"])])]
    return "\n".join(lines) + "\n"
