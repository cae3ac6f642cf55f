"""sphere_flow's measurements from the simulations, the claims and the report tables (pure
functions of the metrics, so `iclr-ray report` re-renders them from result.json alone).

Every claim compares what a cell measured with the theory's prediction for the β written in
that cell's row (k*(β), λ_k*(β)), recomputed here rather than read back, so relabelling the rows
(a negative control) changes the verdict. Intervals resample the unit the experiment repeats
independently: a seed (its start is shared by every β and form of an experiment), a noise
realisation of the PDE, or an (n, seed) start of the token-count sweep."""
from __future__ import annotations

import math
from collections import Counter
from typing import Any, Callable, Sequence

import numpy as np
from scipy import stats

from ...claims import Claim, Estimate, bootstrap, proportion
from ...markdown import fmt, table
from . import growth
from .config import Config
from .observables import linear_phase, time_below

# Bounds, fixed from the paper's statements before any run (docs/studies/sphere_flow.md)
MATCH = 0.8
"""'the most unstable mode determines the structure': k* in at least 80% of the cells"""
RATE_TOL = 0.2
"""measured growth of k* within 20% of the linearised λ_{k*}"""
PLATEAU_RATIO = 3.0
"""'meta-stable': the first clustered configuration outlives the time it took to form threefold"""
SPEARMAN = 0.8
"""'the meta-stable time grows with the parameters' (our reading): plateau against β"""
N_GROWTH = 0.0
"""'close to the meta-stable manifold in the limit of many tokens': the k*-cluster state lasts
longer as n grows (time units per e-fold of n; the paper states no rate, only the growth)"""
ENERGY_TOL = 1e-8
"""relative decrease of the interaction energy between observations allowed to rounding (a check)"""
MASS_TOL = 1e-12
"""relative drift of the PDE's mass, which the conservative scheme keeps to rounding (a check)"""


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def _median(xs) -> float:
    xs = [x for x in xs if _finite(x)]
    return float(np.median(xs)) if xs else math.nan


def particle_summary(cell: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
    lin = out["linear"]
    k = out["k_star"]
    row = {key: cell[key] for key in ("experiment", "beta", "d", "form", "n", "seed")}
    row.update({"k_star": k, "separation": growth.separation(cell["beta"], cell["d"]), "rate": out["rate"],
                "reached": lin["reached"], "dominant": lin["dominant"], "t_linear": lin["t_end"],
                "slope": lin["slopes"][k - 1] if lin["reached"] else math.nan,
                "slopes": lin["slopes"] if lin["reached"] else [],
                "energy_max_drop": out["energy_max_drop"], "max_defect": out["max_defect"], "steps": out["steps"],
                "rejected": out["rejected"], "evals": out["evals"], "t_end": out["t_end"], "seconds": out["seconds"]})
    if "plateau" in out:
        row["plateau"] = out["plateau"]
    if cell["experiment"] == "metastable_n":
        t_below, censored = time_below(out["t"], out["count"], k)
        row.update({"t_below": t_below, "censored": censored,
                    "meta_time": t_below - lin["t_end"] if lin["reached"] else math.nan})
    return row


def pde_summary(cell: dict[str, Any], out: dict[str, Any], threshold: float) -> dict[str, Any]:
    lin = linear_phase(out["t"], out["amps"], threshold)
    k = out["k_star"]
    return {"beta": cell["beta"], "d": 2, "form": cell["form"], "grid": cell["n"], "seed": cell["seed"], "k_star": k,
            "rate": out["rate"], "dominant": lin["dominant"], "t_linear": lin["t_end"],
            "slope": lin["slopes"][k - 1] if lin["reached"] else math.nan,
            "slopes": lin["slopes"] if lin["reached"] else [], "pattern": out["pattern"],
            "final_amps": np.asarray(out["amps"][-1]).tolist(), "t_end": out["t_end"], "dt": out["dt"],
            "courant_max": out["courant_max"], "u_min": float(np.min(out["u_min"])),
            "mass_drift": float(np.max(np.abs(out["mass"] - 1.0))), "steps": out["steps"], "seconds": out["seconds"]}


def predicted_mode(row: dict[str, Any]) -> int:
    """k*(β) for the β and d the row carries."""
    return growth.k_star(row["beta"], row["d"])


def rate_error(row: dict[str, Any]) -> float:
    """|measured / predicted − 1| for the growth rate of k*(β) at the row's β and form: the fitted
    log-amplitude slope (stored in units of the cell's own time unit ``rate``) against λ_k*(β).
    A mode the run did not observe is an infinite error."""
    k = predicted_mode(row)
    if not row["slopes"]:
        return math.nan
    if k > len(row["slopes"]):
        return math.inf
    if not _finite(row["slopes"][k - 1]):  # too short a linear phase to fit (null once read back)
        return math.nan
    ratio = row["slopes"][k - 1] * math.exp(math.log(row["rate"]) - growth.log_rates(row["beta"], row["d"], [k],
                                                                                      row["form"])[0])
    return abs(ratio - 1.0)


def over_units(units: Sequence[Sequence[float]], statistic: Callable[[np.ndarray], float]) -> Estimate:
    """``statistic`` of the values of all units pooled, with the percentile-bootstrap interval from
    resampling whole units (a seed with every cell it started)."""
    arrays = [np.asarray(u, float) for u in units]

    def pooled(idx):
        return float(statistic(np.concatenate([arrays[i] for i in idx]))) if len(idx) else math.nan

    return bootstrap(np.arange(len(arrays)), pooled)


def _by(rows: list[dict[str, Any]], key: Callable[[dict], Any], value: Callable[[dict], float]) -> list[list[float]]:
    groups: dict[Any, list[float]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(value(r))
    return list(groups.values())


def _measured_median(x: np.ndarray) -> float:
    """The median of the values that were measured (NaN: not measured; an infinite error counts)."""
    x = x[~np.isnan(x)]
    return float(np.median(x)) if len(x) else math.nan


def dominant_share(rows: list[dict[str, Any]], separation: float) -> tuple[Estimate, list[float]]:
    """Share of the cells at separated β (λ_k*/λ_2nd >= ``separation``) whose dominant mode was
    k*(β), resampled over seeds; the β left out."""
    inc = [r for r in rows if growth.separation(r["beta"], r["d"]) >= separation]
    excluded = sorted({r["beta"] for r in rows} - {r["beta"] for r in inc})
    units = _by(inc, lambda r: r["seed"], lambda r: float(r["dominant"] == predicted_mode(r)))
    return over_units(units, np.mean), excluded


def plateau_matrix(rows: list[dict[str, Any]]) -> tuple[list[float], np.ndarray]:
    """The β of the meta-stable cells and their plateaus as seeds x β (NaN where no cluster formed;
    forms pooled by their median per seed)."""
    betas = sorted({r["beta"] for r in rows})
    seeds = sorted({r["seed"] for r in rows})
    P = np.full((len(seeds), len(betas)), math.nan)
    for i, s in enumerate(seeds):
        for j, b in enumerate(betas):
            P[i, j] = _median(r["plateau"]["plateau"] for r in rows
                              if r["seed"] == s and r["beta"] == b and r["plateau"]["formed"])
    return betas, P


def trend(betas: Sequence[float], P: np.ndarray) -> float:
    """Spearman correlation of β with the median plateau over the seeds at that β."""
    with np.errstate(all="ignore"):
        med = np.array([np.median(c[np.isfinite(c)]) if np.isfinite(c).any() else math.nan for c in P.T])
    ok = np.isfinite(med)
    if ok.sum() < 3 or np.ptp(med[ok]) == 0:
        return math.nan
    return float(stats.spearmanr(np.asarray(betas)[ok], med[ok]).statistic)


def n_slope(log_n: np.ndarray, times: np.ndarray) -> float:
    """Least-squares slope of the median time at each n against log n (time units per e-fold of n)."""
    levels = np.unique(log_n)
    pts = [(lv, np.median(times[log_n == lv])) for lv in levels]
    pts = [(x, y) for x, y in pts if math.isfinite(y)]
    if len(pts) < 2:
        return math.nan
    x, y = np.array(pts).T
    return float(np.polyfit(x, y, 1)[0])


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


def metastable_n_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for n in sorted({r["n"] for r in rows}):
        group = [r for r in rows if r["n"] == n]
        formed = [r["plateau"] for r in group if r["plateau"]["formed"]]
        out.append({"n": n, "beta": group[0]["beta"], "k_star": group[0]["k_star"], "cells": len(group),
                    "t_linear": _median(r["t_linear"] for r in group),
                    "dominant": dict(sorted(Counter(r["dominant"] for r in group if r["dominant"]).items())),
                    "first_counts": dict(sorted(Counter(p["count"] for p in formed).items())),
                    "t_below": _median(r["t_below"] for r in group),
                    "meta_time": _median(r["meta_time"] for r in group),
                    "censored": sum(r["censored"] for r in group)})
    return out


def _bin_mean(x: np.ndarray, bins: int) -> list[float]:
    """A periodic grid function averaged onto ``bins`` equal arcs (each cell to the arc holding its left end)."""
    x = np.asarray(x, float)
    idx = np.arange(len(x)) * bins // len(x)
    return (np.bincount(idx, weights=x, minlength=bins) / np.bincount(idx, minlength=bins)).tolist()


def figure_data(cells: list[dict[str, Any]], outs: list[dict[str, Any]], separation: float,
                bins: int = 180, pde_bins: int = 720) -> dict[str, Any]:
    """What the figures draw, taken from the simulations: the mode amplitudes of seed 0 of up to
    three circle β (the clearly separated ones first), one sphere β and one PDE (k* and its
    neighbours); angle histograms of the first four meta-stable runs with snapshots; token
    directions on the sphere at the start and end; every meta-stable run's cluster count by its
    change points; the PDE densities of seed 0 averaged onto ``pde_bins`` arcs."""
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
        "pde_density": ({"grid": pde[0][0]["n"], "beta": pde[0][0]["beta"], "form": pde[0][0]["form"],
                         "bins": min(pde_bins, pde[0][0]["n"]),
                         "densities": [{"t": d["t"], "rho": _bin_mean(d["rho"], min(pde_bins, pde[0][0]["n"]))}
                                       for d in pde[0][1]["densities"]]}
                        if pde else None),
    }


def analyse(cfg: Config, cells: list[dict[str, Any]], outs: list[dict[str, Any]]) -> dict[str, Any]:
    parts = [(c, o) for c, o in zip(cells, outs) if c["experiment"] != "pde"]
    rows = [particle_summary(c, o) for c, o in parts]
    pdes = [pde_summary(c, o, cfg.threshold) for c, o in zip(cells, outs) if c["experiment"] == "pde"]
    by = {e: [r for r in rows if r["experiment"] == e] for e in ("circle", "sphere", "metastable", "metastable_n")}
    return {
        "time_unit": "1/lambda_{k*} of each cell's form: t = 1 is one e-folding of the most unstable linear mode",
        "threshold": cfg.threshold, "separation_rule": cfg.separation, "integrator": cfg.integrator,
        **by,
        "circle_table": mode_table(by["circle"], cfg.separation),
        "sphere_table": mode_table(by["sphere"], cfg.separation),
        "metastable_table": metastable_table(by["metastable"]),
        "metastable_n_table": metastable_n_table(by["metastable_n"]),
        "pde": pdes,
        "numerics": {"energy_max_drop": max((r["energy_max_drop"] for r in rows), default=0.0),
                     "max_defect": max((r["max_defect"] for r in rows), default=0.0),
                     "pde_mass_drift": max((p["mass_drift"] for p in pdes), default=0.0),
                     "pde_courant_max": max((p["courant_max"] for p in pdes), default=0.0),
                     "steps": sum(r["steps"] for r in rows), "evals": sum(r["evals"] for r in rows),
                     "rejected": sum(r["rejected"] for r in rows), "pde_steps": sum(p["steps"] for p in pdes),
                     "task_seconds": sum(r["seconds"] for r in rows) + sum(p["seconds"] for p in pdes)},
        "figures": figure_data(cells, outs, cfg.separation),
    }


def _counts(d: dict) -> str:
    """{mode: cells} as 'mode: cells, ...' (keys are strings once read back from result.json)."""
    return ", ".join(f"{k}: {v}" for k, v in sorted(d.items(), key=lambda kv: int(kv[0]))) or "-"


def _dom(table) -> str:
    forms = len({t["form"] for t in table}) > 1
    return "; ".join(f"β={t['beta']:g}{' ' + t['form'].upper() if forms else ''}: k*={t['k_star']}, "
                     f"seen {_counts(t['dominant'])}" for t in table if t["included"])


def claims(metrics: dict[str, Any], cfg: Config) -> list[Claim]:
    out = []
    sphere = f"on S^{cfg.sphere.d - 1} (d = {cfg.sphere.d})"
    for name, d_label in (("circle", "on the circle (d = 2)"), ("sphere", sphere)):
        rows = [r for r in metrics[name] if r["reached"]]
        if not rows:
            continue
        share, excluded = dominant_share(rows, metrics["separation_rule"])
        out.append(Claim.at_least(
            f"dominant_mode_{name}",
            f"Linear phase {d_label}: from i.i.d. uniform tokens the most unstable mode k*(β) = argmax λ_ℓ "
            f"dominates when the largest mode amplitude first reaches {metrics['threshold']:g} (share of cells; "
            "interval over seeds; 'the most unstable mode determines the structure' read as k* in at least 80% of "
            "cells)", share, MATCH,
            f"β with λ_k*/λ_2nd >= {metrics['separation_rule']:g}; excluded β "
            f"{', '.join(f'{b:g}' for b in excluded) or 'none'}; {_dom(metrics[f'{name}_table'])}", source="paper-read"))
    cells = [r for r in metrics["circle"] + metrics["sphere"] if r["reached"]]
    if cells:
        units = _by(cells, lambda r: (r["experiment"], r["seed"]), rate_error)
        errs = [rate_error(r) for r in cells]
        per_d = ", ".join(f"d = {d}: {_median(rate_error(r) for r in cells if r['d'] == d):.3f}"
                          for d in sorted({r["d"] for r in cells}))
        out.append(Claim.at_most(
            "growth_rate_particles",
            "Particles: the amplitude of mode k* grows like e^{λ_k* t} in the linear phase (median relative error "
            "of the fitted log-amplitude slope against λ_k*(β); interval over seeds)",
            over_units(units, _measured_median), RATE_TOL,
            f"{len(cells)} cells; {per_d}; largest {max(errs):.3f}", source="ours"))
    pdes = [p for p in metrics["pde"] if p["slopes"]]
    if pdes:
        errs = [rate_error(p) for p in pdes]
        out.append(Claim.at_most(
            "growth_rate_pde",
            "Mean-field PDE (d = 2, Lax–Friedrichs): mode k* grows at λ_k* = k*² I_k*(β)/β from a white-noise "
            "start "
            "(median relative error; interval over noise seeds)",
            over_units([[e] for e in errs], _measured_median), RATE_TOL,
            f"{len(errs)} seeds, β = {pdes[0]['beta']:g}, {pdes[0]['grid']} cells; largest {max(errs):.4f}",
            source="ours"))
    meta = metrics["metastable"]
    formed = [r for r in meta if r["plateau"]["formed"]]
    if formed:
        units = _by(formed, lambda r: r["seed"], lambda r: r["plateau"]["plateau"] / r["plateau"]["t_form"])
        at_k = sum(r["plateau"]["count"] == predicted_mode(r) for r in formed)
        out.append(Claim.at_least(
            "metastable_plateau",
            "Meta-stability (d = 2): the first clustered configuration persists for a long time, the plateau "
            "(until the cluster count first changes) over the time it took to form (median over cells; interval "
            "over seeds; 'a long time' read as at least 3x)", over_units(units, _measured_median), PLATEAU_RATIO,
            f"{len(formed)} of {len(meta)} cells clustered, {at_k} of them into k*(β) clusters; "
            f"merging seen in {sum(r['plateau']['merged'] for r in formed)}; "
            f"{sum(r['plateau']['censored'] for r in formed)} still on their first plateau at the horizon",
            source="paper-read"))
    if meta:
        betas, P = plateau_matrix(meta)
        est = bootstrap(P, lambda M: trend(betas, M))
        with np.errstate(all="ignore"):
            med = [np.median(c[np.isfinite(c)]) if np.isfinite(c).any() else math.nan for c in P.T]
        out.append(Claim.at_least(
            "plateau_grows_with_beta",
            "The meta-stable time grows with β (our reading of 'exponentially long in the parameters', as a Spearman "
            "correlation of β with the median plateau of at least 0.8; interval over seeds)", est, SPEARMAN,
            "median plateau " + ", ".join(f"{fmt(p, '.3g')} at β={b:g}" for b, p in zip(betas, med)),
            source="paper-read"))
    rows = [r for r in metrics["metastable_n"] if _finite(r["meta_time"])]
    if rows:
        log_n = np.log([float(r["n"]) for r in rows])
        times = np.array([r["meta_time"] for r in rows])
        table_ = metrics["metastable_n_table"]
        out.append(Claim.at_least(
            "metastable_grows_with_n",
            f"Many tokens (d = 2, β = {rows[0]['beta']:g}, k* = {predicted_mode(rows[0])}): the k*-cluster state "
            "lasts longer as n grows (the time from the end of the linear phase until fewer than k* clusters are "
            "left: slope of its median against log n, time units per e-fold of n; interval over (n, seed) starts; "
            "the abstract's 'remains close to a meta-stable manifold' for many tokens read as a slope of at least 0)",
            bootstrap((log_n, times), n_slope), N_GROWTH,
            "median " + ", ".join(f"{fmt(t['meta_time'], '.3g')} at n={t['n']}" for t in table_)
            + f"; {sum(t['censored'] for t in table_)} censored at the horizon", source="paper-read"))
    pdes = metrics["pde"]
    if pdes:
        hits = sum(p["pattern"] == predicted_mode(p) for p in pdes)
        out.append(Claim.at_least(
            "fig4_periodic",
            f"Fig. 4: the mean-field PDE from uniform + white noise (σ = {cfg.pde.sigma:g}, absolute) at β = "
            f"{pdes[0]['beta']:g} becomes k*(β)-periodic (share of noise seeds whose largest mode at the notebook's "
            "horizon is k*; Wilson interval; 'becomes periodic' read as at least 80% of seeds)",
            proportion(hits, len(pdes)), MATCH,
            f"k* = {predicted_mode(pdes[0])}; "
            f"patterns {_counts(dict(sorted(Counter(p['pattern'] for p in pdes).items())))}; "
            f"dominant mode at amplitude {metrics['threshold']:g}: "
            f"{_counts(dict(sorted(Counter(p['dominant'] for p in pdes if p['dominant']).items())))}",
            source="paper-read"))
    num = metrics["numerics"]
    out.append(Claim.at_most(
        "energy_nondecreasing",
        "The particle dynamics is a gradient flow of the interaction energy (1/2β)ΣΣ e^{β⟨x_i,x_j⟩}: it never "
        "decreases along a trajectory (largest relative drop between observations, all particle cells)",
        num["energy_max_drop"], ENERGY_TOL,
        f"sphere constraint: largest ||x_i| - 1| before retraction {num['max_defect']:.1e}", check=True))
    if pdes:
        out.append(Claim.at_most(
            "pde_mass_conserved",
            "The conservative Lax–Friedrichs scheme keeps the PDE's mass (largest relative drift, all seeds)",
            num["pde_mass_drift"], MASS_TOL, check=True))
        out.append(Claim.at_most(
            "pde_courant",
            "The PDE step stays within the Lax–Friedrichs stability limit (largest Courant number dt max|v|/dθ)",
            num["pde_courant_max"], 1.0, f"smallest density {min(p['u_min'] for p in pdes):.3g} x uniform",
            check=True))
    return out


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
    if metrics["metastable_n_table"]:
        parts.append("### The k*-cluster state against the number of tokens (d = 2)\n\n" + table(
            ["n", "β", "k*", "starts", "dominant modes", "first clusters (count: cells)", "end of linear phase",
             "fewer than k* clusters at", "k*-state time (median)", "censored"],
            [[str(t["n"]), f"{t['beta']:g}", str(t["k_star"]), str(t["cells"]), _counts(t["dominant"]),
              _counts(t["first_counts"]), fmt(t["t_linear"], ".3g"), fmt(t["t_below"], ".3g"),
              fmt(t["meta_time"], ".3g"), str(t["censored"])] for t in metrics["metastable_n_table"]]))
    if metrics["pde"]:
        parts.append("### Mean-field PDE (d = 2, Fig. 4; Lax–Friedrichs)\n\n" + table(
            ["seed", "cells", "form", "dominant at threshold", "largest mode at the horizon", "k* slope / λ_k*",
             "A_1..A_6 at the horizon", "horizon", "steps", "largest Courant number", "mass drift"],
            [[str(p["seed"]), str(p["grid"]), p["form"], str(p["dominant"]), str(p["pattern"]), fmt(p["slope"], ".4f"),
              ", ".join(f"{a:.2f}" for a in p["final_amps"][:6]), fmt(p["t_end"], ".3g"), str(p["steps"]),
              f"{p['courant_max']:.3f}", f"{p['mass_drift']:.1e}"] for p in metrics["pde"]]))
    n = metrics["numerics"]
    parts.append(f"Numerics: {n['steps']:,} accepted particle steps ({n['rejected']:,} rejected), {n['evals']:,} "
                 f"velocity evaluations, {n['pde_steps']:,} PDE steps; largest relative energy drop "
                 f"{n['energy_max_drop']:.1e}; largest sphere defect before retraction {n['max_defect']:.1e}; PDE mass "
                 f"drift {n['pde_mass_drift']:.1e}; {n['task_seconds']:.0f} s of task time.")
    return "\n\n".join(parts)
