"""sphere_flow's measurements from the simulations, the claims and the report tables (pure
functions of the metrics, so `iclr-ray report` re-renders them from result.json alone)."""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
from scipy import stats

from ...claims import Claim
from ...markdown import fmt, table
from . import growth
from .config import Config

# Bounds, fixed from the paper's statements before any run (docs/studies/sphere_flow.md)
MATCH = 0.8
"""'the most unstable mode determines the structure': k* in at least 80% of the cells"""
RATE_TOL = 0.2
"""measured growth of k* within 20% of the linearised λ_{k*}"""
PLATEAU_RATIO = 3.0
"""'meta-stable': the first clustered configuration outlives the time it took to form threefold"""
SPEARMAN = 0.8
"""'the meta-stable time grows with the parameters' (our reading): plateau against β"""
ENERGY_TOL = 1e-8
"""relative decrease of the interaction energy between observations allowed to rounding"""


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def _median(xs) -> float:
    xs = [x for x in xs if _finite(x)]
    return float(np.median(xs)) if xs else math.nan


def particle_summary(cell: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    lin = out["linear"]
    k = out["k_star"]
    row = {key: cell[key] for key in ("experiment", "beta", "d", "form", "n", "seed")}
    row.update({"k_star": k, "separation": growth.separation(cell["beta"], cell["d"]), "reached": lin["reached"],
                "dominant": lin["dominant"], "t_linear": lin["t_end"],
                "slope": lin["slopes"][k - 1] if lin["reached"] else math.nan,
                "energy_max_drop": out["energy_max_drop"], "max_defect": out["max_defect"], "steps": out["steps"],
                "rejected": out["rejected"], "evals": out["evals"], "t_end": out["t_end"], "seconds": out["seconds"]})
    if "plateau" in out:
        row["plateau"] = out["plateau"]
    return row


def pde_summary(cell: dict[str, Any], out: dict[str, Any], threshold: float) -> dict[str, Any]:
    from .observables import linear_phase

    lin = linear_phase(out["t"], out["amps"], threshold)
    k = out["k_star"]
    return {"beta": cell["beta"], "form": cell["form"], "grid": cell["n"], "seed": cell["seed"], "k_star": k,
            "dominant": lin["dominant"], "t_linear": lin["t_end"],
            "slope": lin["slopes"][k - 1] if lin["reached"] else math.nan, "pattern": out["pattern"],
            "t_resolved": out["t_resolved"], "stop": out["stop"],
            "mass_drift": float(np.max(np.abs(out["mass"] - 1.0))), "steps": out["steps"], "seconds": out["seconds"]}


def mode_table(rows: list[dict[str, Any]], separation: float) -> list[dict[str, Any]]:
    """Per (β, form): the predicted k*, whether it is separated enough to count, what dominated."""
    out = []
    for key in dict.fromkeys((r["beta"], r["form"]) for r in rows):
        group = [r for r in rows if (r["beta"], r["form"]) == key]
        k, sep = group[0]["k_star"], group[0]["separation"]
        doms = [r["dominant"] for r in group]
        out.append({"beta": key[0], "form": key[1], "d": group[0]["d"], "k_star": k, "separation": sep,
                    "included": sep >= separation, "cells": len(group),
                    "dominant": dict(sorted(Counter(d for d in doms if d is not None).items())),
                    "match": float(np.mean([d == k for d in doms])), "slope": _median(r["slope"] for r in group),
                    "t_linear": _median(r["t_linear"] for r in group)})
    return out


def metastable_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for key in dict.fromkeys((r["beta"], r["form"]) for r in rows):
        group = [r for r in rows if (r["beta"], r["form"]) == key]
        ps = [r["plateau"] for r in group]
        formed = [p for p in ps if p["formed"]]
        out.append({"beta": key[0], "form": key[1], "k_star": group[0]["k_star"], "cells": len(group),
                    "formed": len(formed), "counts": dict(sorted(Counter(p["count"] for p in formed).items())),
                    "t_form": _median(p["t_form"] for p in formed), "plateau": _median(p["plateau"] for p in formed),
                    "ratio": _median(p["plateau"] / p["t_form"] for p in formed),
                    "censored": sum(p["censored"] for p in formed), "merged": sum(p["merged"] for p in formed),
                    "longest": _median(p["longest"] for p in formed),
                    "longest_counts": dict(sorted(Counter(p["longest_count"] for p in formed).items())),
                    "longest_censored": sum(p["longest_censored"] for p in formed),
                    "final": dict(sorted(Counter(p["final_count"] for p in formed).items())),
                    "horizon": _median(r["t_end"] for r in group)})
    return out


def _spread(items: list, k: int) -> list:
    if len(items) <= k:
        return items
    return [items[i] for i in np.unique(np.linspace(0, len(items) - 1, k).round().astype(int))]


def _changes(t, count) -> tuple[list[float], list[int]]:
    """A step function (where > 0) by its change points and its last point: drawn with
    ``where="post"`` it is the same line as all of its points."""
    t, count = np.asarray(t, float), np.asarray(count)
    on = count > 0
    t, count = t[on], count[on]
    keep = np.ones(len(count), bool)
    keep[1:-1] = count[1:-1] != count[:-2]
    return t[keep].tolist(), count[keep].astype(int).tolist()


def figure_data(cells: list[dict[str, Any]], outs: list[dict[str, Any]], separation: float,
                bins: int = 180) -> dict[str, Any]:
    """What the figures draw, taken from the simulations: the mode amplitudes of seed 0 of up to
    three circle β (the clearly separated ones first), one sphere β and one PDE (k* and its
    neighbours); angle histograms of the first four meta-stable runs with snapshots; token
    directions on the sphere at the start and end; every meta-stable run's cluster count by its
    change points; the PDE densities of seed 0."""
    pairs = list(zip(cells, outs))

    def first(kind):
        runs = [(c, o) for c, o in pairs if c["experiment"] == kind and c["seed"] == 0]
        form = runs[0][0]["form"] if runs else None
        runs = [(c, o) for c, o in runs if c["form"] == form]
        clear = [(c, o) for c, o in runs if growth.separation(c["beta"], c["d"]) >= separation]
        return clear or runs

    def panel(c, o):
        amps, k = np.asarray(o["amps"]), o["k_star"]
        modes = [m for m in range(k - 2, k + 3) if 1 <= m <= amps.shape[1]]
        return {"experiment": c["experiment"], "beta": c["beta"], "d": c["d"], "form": c["form"], "k_star": k,
                "modes": modes, "t": np.asarray(o["t"]).tolist(), "amps": amps[:, [m - 1 for m in modes]].tolist(),
                "amps_min": float(amps.min())}

    def histogram(x):
        x = np.asarray(x, float)
        h, _ = np.histogram(np.arctan2(x[:, 1], x[:, 0]), bins=np.linspace(-np.pi, np.pi, bins + 1))
        return (h * bins / len(x)).tolist()

    def directions(x):
        x = np.asarray(x, float)[:, :3]
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)  # d > 3: direction in 3D
        return np.arctan2(x[:, 1], x[:, 0]).tolist(), np.arcsin(np.clip(x[:, 2], -1, 1)).tolist()

    meta = [(c, o) for c, o in pairs if c["experiment"] == "metastable"]
    sphere = [(c, o) for c, o in pairs if c["experiment"] == "sphere" and o["snapshots"]][:4]
    pde = [(c, o) for c, o in pairs if c["experiment"] == "pde" and o["densities"]]
    return {
        "amplitudes": [panel(c, o) for c, o in _spread(first("circle"), 3) + first("sphere")[:1] + first("pde")[:1]],
        "circle_snapshots": [{"beta": c["beta"], "snapshots": [{"t": s["t"], "density": histogram(s["x"])}
                                                              for s in o["snapshots"]]}
                             for c, o in meta if o["snapshots"]][:4],
        "cluster_counts": [{"beta": c["beta"], "seed": c["seed"], "form": c["form"], "k_star": o["k_star"],
                            **dict(zip(("t", "count"), _changes(o["t"], o["count"])))} for c, o in meta],
        "sphere_snapshots": [{"d": c["d"], "beta": c["beta"], "k_star": o["k_star"],
                              "snapshots": [{"t": s["t"], **dict(zip(("lon", "lat"), directions(s["x"])))}
                                            for s in (o["snapshots"][0], o["snapshots"][-1])]} for c, o in sphere],
        "pde_density": ({"grid": pde[0][0]["n"], "beta": pde[0][0]["beta"], "t_resolved": pde[0][1]["t_resolved"],
                         "densities": [{"t": d["t"], "rho": np.asarray(d["rho"]).tolist()}
                                       for d in pde[0][1]["densities"]]}
                        if pde else None),
    }


def analyse(cfg: Config, cells: list[dict[str, Any]], outs: list[dict[str, Any]]) -> dict[str, Any]:
    parts = [(c, o) for c, o in zip(cells, outs) if c["experiment"] != "pde"]
    rows = [particle_summary(c, o) for c, o in parts]
    pdes = [pde_summary(c, o, cfg.threshold) for c, o in zip(cells, outs) if c["experiment"] == "pde"]
    by = {e: [r for r in rows if r["experiment"] == e] for e in ("circle", "sphere", "metastable")}
    return {
        "time_unit": "1/lambda_{k*} of each cell's form: t = 1 is one e-folding of the most unstable linear mode",
        "threshold": cfg.threshold, "separation_rule": cfg.separation, "integrator": cfg.integrator,
        **by,
        "circle_table": mode_table(by["circle"], cfg.separation),
        "sphere_table": mode_table(by["sphere"], cfg.separation),
        "metastable_table": metastable_table(by["metastable"]),
        "pde": pdes,
        "numerics": {"energy_max_drop": max((r["energy_max_drop"] for r in rows), default=0.0),
                     "max_defect": max((r["max_defect"] for r in rows), default=0.0),
                     "pde_mass_drift": max((p["mass_drift"] for p in pdes), default=0.0),
                     "steps": sum(r["steps"] for r in rows), "evals": sum(r["evals"] for r in rows),
                     "rejected": sum(r["rejected"] for r in rows),
                     "task_seconds": sum(r["seconds"] for r in rows) + sum(p["seconds"] for p in pdes)},
        "figures": figure_data(cells, outs, cfg.separation),
    }


def match_fraction(table: list[dict[str, Any]]) -> tuple[float, int, list[float]]:
    """Share of the cells of the included β whose dominant mode was k*; the excluded β."""
    inc = [t for t in table if t["included"]]
    n = sum(t["cells"] for t in inc)
    frac = sum(t["match"] * t["cells"] for t in inc) / n if n else math.nan
    return frac, n, sorted({t["beta"] for t in table if not t["included"]})


def plateau_trend(table: list[dict[str, Any]]) -> tuple[float, list[tuple[float, float]]]:
    """Spearman correlation of β with the median plateau (over forms and seeds) at that β."""
    betas = sorted({t["beta"] for t in table})
    pts = [(b, _median(t["plateau"] for t in table if t["beta"] == b)) for b in betas]
    pts = [(b, p) for b, p in pts if _finite(p)]
    if len(pts) < 3:
        return math.nan, pts
    return float(stats.spearmanr([b for b, _ in pts], [p for _, p in pts]).statistic), pts


def _dom(table) -> str:
    forms = len({t["form"] for t in table}) > 1
    return "; ".join(f"β={t['beta']:g}{' ' + t['form'].upper() if forms else ''}: k*={t['k_star']}, "
                     f"seen {_counts(t['dominant'])}" for t in table if t["included"])


def claims(metrics: dict[str, Any], cfg: Config) -> list[Claim]:
    out = []
    sphere = f"on S^{cfg.sphere.d - 1} (d = {cfg.sphere.d})"
    for name, d_label in (("circle", "on the circle (d = 2)"), ("sphere", sphere)):
        table = metrics[f"{name}_table"]
        if not table:
            continue
        frac, n, excluded = match_fraction(table)
        out.append(Claim.at_least(
            f"dominant_mode_{name}",
            f"Linear phase {d_label}: from i.i.d. uniform tokens the most unstable mode k*(β) = argmax λ_ℓ "
            f"dominates when the largest mode amplitude first reaches {metrics['threshold']:g} (share of cells)",
            frac, MATCH, f"{n} cells at β with λ_k*/λ_2nd >= {metrics['separation_rule']:g}; excluded β "
                         f"{', '.join(f'{b:g}' for b in excluded) or 'none'}; {_dom(table)}"))
    cells = [r for r in metrics["circle"] + metrics["sphere"] if r["reached"]]
    if cells:
        errs = [abs(r["slope"] - 1.0) for r in cells]
        per_d = ", ".join(f"d = {d}: {_median(abs(r['slope'] - 1) for r in cells if r['d'] == d):.3f}"
                          for d in sorted({r["d"] for r in cells}))
        out.append(Claim.at_most(
            "growth_rate_particles",
            "Particles: the amplitude of mode k* grows like e^{λ_k* t} in the linear phase (median relative error "
            "of the fitted log-amplitude slope against λ_k*)", _median(errs), RATE_TOL,
            f"{len(cells)} cells; {per_d}; largest {max(errs):.3f}"))
    if metrics["pde"]:
        errs = [abs(p["slope"] - 1.0) for p in metrics["pde"]]
        out.append(Claim.at_most(
            "growth_rate_pde",
            "Mean-field PDE (d = 2): mode k* grows at λ_k* = k*² I_k*(β)/β from a white-noise start (median "
            "relative error over noise seeds)", _median(errs), RATE_TOL,
            f"{len(errs)} seeds, β = {metrics['pde'][0]['beta']:g}; largest {max(errs):.4f}"))
    table = metrics["metastable_table"]
    formed = [r["plateau"] for r in metrics["metastable"] if r["plateau"]["formed"]]
    if table:
        ratio = _median(p["plateau"] / p["t_form"] for p in formed)
        at_k = sum(r["plateau"]["count"] == r["k_star"] for r in metrics["metastable"] if r["plateau"]["formed"])
        out.append(Claim.at_least(
            "metastable_plateau",
            "Meta-stability (d = 2): the first clustered configuration persists for a long time, the plateau "
            "(until the cluster count first changes) over the time it took to form (median over cells)",
            ratio, PLATEAU_RATIO,
            f"{len(formed)} of {len(metrics['metastable'])} cells clustered, {at_k} of them into k* clusters; "
            f"{sum(p['censored'] for p in formed)} plateaus lasted to the end (lower bounds); merging seen in "
            f"{sum(p['merged'] for p in formed)}"))
        rho, pts = plateau_trend(table)
        out.append(Claim.at_least(
            "plateau_grows_with_beta",
            "The meta-stable time grows with β (our reading of 'exponentially long in the parameters'): Spearman "
            "correlation of β with the median plateau", rho, SPEARMAN,
            "median plateau " + ", ".join(f"{p:.3g} at β={b:g}" for b, p in pts)))
    if metrics["pde"]:
        k = metrics["pde"][0]["k_star"]
        pats = [p["pattern"] for p in metrics["pde"]]
        doms = [p["dominant"] for p in metrics["pde"]]
        out.append(Claim.at_least(
            "fig4_periodic",
            f"Fig. 4: the mean-field PDE from uniform + white noise (σ = {cfg.pde.sigma:g}) at β = "
            f"{metrics['pde'][0]['beta']:g} becomes {k}-periodic (share of noise seeds whose largest mode at the "
            "last resolved time is k*)", float(np.mean([p == k for p in pats])), MATCH,
            f"patterns {_counts(dict(sorted(Counter(pats).items())))}; dominant mode at amplitude "
            f"{metrics['threshold']:g}: {_counts(dict(sorted(Counter(d for d in doms if d is not None).items())))}"))
    num = metrics["numerics"]
    out.append(Claim.at_most(
        "energy_nondecreasing",
        "The dynamics is a gradient flow of the interaction energy (1/2β)ΣΣ e^{β⟨x_i,x_j⟩}: it never decreases "
        "along a trajectory (largest relative drop between observations, all particle cells)",
        num["energy_max_drop"], ENERGY_TOL,
        f"sphere constraint: largest ||x_i| - 1| before retraction {num['max_defect']:.1e}"))
    return out


def _counts(d: dict) -> str:
    """{mode: cells} as 'mode: cells, ...' (keys are strings once read back from result.json)."""
    return ", ".join(f"{k}: {v}" for k, v in sorted(d.items(), key=lambda kv: int(kv[0]))) or "-"


def report_md(metrics: dict[str, Any], cfg: Config) -> str:
    parts = [f"Time unit: {metrics['time_unit']}. Linear phase ends when the largest mode amplitude reaches "
             f"{metrics['threshold']:g}; β with λ_k*/λ_2nd < {metrics['separation_rule']:g} are left out of the "
             f"mode claims. Integrator: {metrics['integrator']}."]
    for name, title in (("circle_table", "Linear phase on the circle (d = 2)"),
                        ("sphere_table", "Linear phase on the sphere (d >= 3)")):
        if metrics[name]:
            parts.append(f"### {title}\n\n" + table(
                ["β", "form", "k*", "λ_k*/λ_2nd", "in claim", "dominant modes (cells)", "k* share",
                 "k* slope / λ_k* (median)", "end of linear phase (median)"],
                [[f"{t['beta']:g}", t["form"], str(t["k_star"]), f"{t['separation']:.3f}",
                  "yes" if t["included"] else "no", _counts(t["dominant"]), f"{t['match']:.2f}", fmt(t["slope"], ".3g"),
                  fmt(t["t_linear"], ".3g")] for t in metrics[name]]))
    if metrics["metastable_table"]:
        parts.append("### Meta-stability on the circle (d = 2)\n\n" + table(
            ["β", "form", "k*", "clustered", "clusters at formation", "formation time", "plateau (median)",
             "plateau / formation", "plateaus to the end", "merged", "longest-lived (count: cells)",
             "longest (median)", "final counts", "horizon"],
            [[f"{t['beta']:g}", t["form"], str(t["k_star"]), f"{t['formed']}/{t['cells']}", _counts(t["counts"]),
              fmt(t["t_form"], ".3g"), fmt(t["plateau"], ".3g"), fmt(t["ratio"], ".3g"), str(t["censored"]),
              str(t["merged"]), _counts(t["longest_counts"]),
              fmt(t["longest"], ".3g") + (f" (to the end: {t['longest_censored']})" if t["longest_censored"] else ""),
              _counts(t["final"]), fmt(t["horizon"], ".3g")] for t in metrics["metastable_table"]]))
    if metrics["pde"]:
        parts.append("### Mean-field PDE (d = 2, Fig. 4)\n\n" + table(
            ["seed", "grid", "form", "dominant at threshold", "pattern at last resolved time", "k* slope / λ_k*",
             "resolved until", "stop", "mass drift"],
            [[str(p["seed"]), str(p["grid"]), p["form"], str(p["dominant"]), str(p["pattern"]), fmt(p["slope"], ".4f"),
              fmt(p["t_resolved"], ".3g"), str(p["stop"]), f"{p['mass_drift']:.1e}"] for p in metrics["pde"]]))
    n = metrics["numerics"]
    parts.append(f"Numerics: {n['steps']:,} accepted steps ({n['rejected']:,} rejected), {n['evals']:,} velocity "
                 f"evaluations; largest relative energy drop {n['energy_max_drop']:.1e}; largest sphere defect before "
                 f"retraction {n['max_defect']:.1e}; PDE mass drift {n['pde_mass_drift']:.1e}; "
                 f"{n['task_seconds']:.0f} s of task time.")
    return "\n\n".join(parts)
