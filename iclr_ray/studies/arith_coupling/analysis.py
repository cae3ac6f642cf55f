"""arith_coupling claims and report: pure functions of the metrics (``iclr-ray report`` re-renders
them from result.json alone).

Extrapolation factor along an axis (operand length, or operand count / length of B): the largest
evaluated value v such that every cell from the first evaluated value up to v, with the other
axis inside its training range, reaches the accuracy threshold, divided by the training maximum.
1.0 means "solves exactly the training range"; below 1.0 it does not even fit the training range
(0: not the smallest cell). Factors are measured per trial, i.e. per training seed: the seed is
the unit the claims' intervals are over (t intervals of the mean over seeds; with one seed a
claim's interval is unbounded and its verdict inconclusive)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...claims import Claim, mean
from ...markdown import table
from .config import Config

FIT = 0.95
"""exact match the coupled model needs at its training range's hardest cell before its
extrapolation means anything (issue 21: >= 0.95 at the 4 x 4 corner of multi-operand addition)"""

BASELINE_COLLAPSE = 1.25
"""a baseline "collapses" when it fits its training range (both factors >= 1) but does not extrapolate
past 1.25x its training range along both axes (its smaller factor <= 1.25)"""


def grid_cells(grid: dict[str, float]) -> dict[tuple[int, int], float]:
    return {tuple(int(x) for x in key.split("x")): acc for key, acc in grid.items()}  # type: ignore[misc]


def mean_grid(trials: list[dict], task: str, method: str, variant: str = "") -> dict[tuple[int, int], float]:
    """Accuracy per (digits, count) cell of one method and sweep variant, averaged over seeds."""
    rows = [t for t in trials if t["task"] == task and t["method"] == method and t.get("variant", "") == variant]
    cells: dict[tuple[int, int], list[float]] = {}
    for r in rows:
        for key, acc in grid_cells(r["grid"]).items():
            cells.setdefault(key, []).append(acc)
    return {k: float(np.mean(v)) for k, v in sorted(cells.items())}


def factor(grid: dict[tuple[int, int], float], task: dict[str, Any], axis: str, threshold: float) -> float:
    """The extrapolation factor along ``axis`` ("digits" or "count"), see the module docstring."""
    lo_d, hi_d = task["train_digits"]
    lo_c, hi_c = task["train_count"]
    if axis == "digits":
        values, others, train_max = task["eval_digits"], [c for c in task["eval_count"] if lo_c <= c <= hi_c], hi_d
        cell = lambda v, o: (v, o)  # noqa: E731
    else:
        values, others, train_max = task["eval_count"], [d for d in task["eval_digits"] if lo_d <= d <= hi_d], hi_c
        cell = lambda v, o: (o, v)  # noqa: E731
    best = 0
    for v in sorted(values):
        if not others or any(grid.get(cell(v, o), 0.0) < threshold for o in others):
            break
        best = v
    return best / train_max


def seed_values(trial: dict[str, Any], task: dict[str, Any], threshold: float) -> dict[str, float]:
    """One trial's (one seed's) factors, in-range accuracy and accuracy beyond the range (to 2x)."""
    grid = grid_cells(trial["grid"])
    hi_d, hi_c = task["train_digits"][1], task["train_count"][1]
    ind = [a for (d, c), a in grid.items() if d <= hi_d and c <= hi_c]
    ood = [a for (d, c), a in grid.items() if (d > hi_d or c > hi_c) and d <= 2 * hi_d and c <= 2 * hi_c]
    digits_f, count_f = factor(grid, task, "digits", threshold), factor(grid, task, "count", threshold)
    return {"digits_factor": digits_f, "count_factor": count_f,
            # two-operand addition has one axis: its count is fixed at 2
            "smaller_factor": digits_f if task["name"] == "addition" else min(digits_f, count_f),
            "in_range": float(np.mean(ind)) if ind else math.nan,
            "beyond_to_2x": float(np.mean(ood)) if ood else math.nan,
            # the training range's hardest cell, and twice the trained length (count at its training max)
            "corner": grid.get((hi_d, hi_c), math.nan),
            "at_2x": grid.get((2 * hi_d, hi_c), math.nan)}


def summary(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """Per task, method and sweep variant: its seeds' values (lists, in seed order) and their means."""
    out = []
    th = metrics["threshold"]
    for task in metrics["tasks"]:
        mine = [t for t in metrics["trials"] if t["task"] == task["name"]]
        for method, variant in dict.fromkeys((t["method"], t.get("variant", "")) for t in mine):
            runs = sorted((t for t in mine if t["method"] == method and t.get("variant", "") == variant),
                          key=lambda t: t["seed"])
            per = [seed_values(t, task, th) for t in runs]
            row = {"task": task["name"], "method": method, "variant": variant, "seeds": len(runs),
                   "seed_ids": [t["seed"] for t in runs]}
            for key in ("digits_factor", "count_factor", "in_range", "beyond_to_2x", "corner", "at_2x"):
                vals = [p[key] for p in per]
                row[f"{key}s"] = vals
                finite = [v for v in vals if math.isfinite(v)]
                row[key] = float(np.mean(finite)) if finite else math.nan
            row["smaller_factors"] = [p["smaller_factor"] for p in per]
            out.append(row)
    return out


def best_variants(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (task, method), its best sweep variant's summary row: the largest smaller factor, then
    the larger factor, then in-range accuracy (means over seeds). Every method, the paper's and the
    baselines', is judged at its own best setting."""
    best: dict[tuple[str, str], dict[str, Any]] = {}

    def key(r):
        return (float(np.mean(r["smaller_factors"])), max(r["digits_factor"], r["count_factor"]),
                np.nan_to_num(r["in_range"]))

    for r in rows:
        k = (r["task"], r["method"])
        if k not in best or key(r) > key(best[k]):
            best[k] = r
    return best


AXES = {"multi_addition": ("operand length", "operand count"), "multiplication": ("length of A", "length of B"),
        "addition": ("operand length", "operand length")}


def _seeds(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def _n_seeds(n: int) -> str:
    return f"{n} training seed{'' if n == 1 else 's'}"


def claims(metrics: dict[str, Any], cfg: Config) -> list[Claim]:
    """Per task: the coupled method's factors on both axes (>= 2, the paper's "2-3x"), and per
    baseline that it fits the training range and collapses past it; each over the training seeds."""
    best = best_variants(summary(metrics))
    th = metrics["threshold"]
    out = []
    for task in metrics["tasks"]:
        name = task["name"]
        mine = {m: r for (t, m), r in best.items() if t == name}
        ax_d, ax_c = AXES[name]
        tr = f"trained on {ax_d} ≤ {task['train_digits'][1]}" + (
            "" if name == "addition" else f", {ax_c} ≤ {task['train_count'][1]}")
        if "coupled" in mine:
            c = mine["coupled"]
            at = f"; sweep variant {c['variant']}" if c["variant"] else ""
            unit = f"mean over {_n_seeds(c['seeds'])} (t interval)"
            hi_d, hi_c = task["train_digits"][1], task["train_count"][1]
            corner = f"{hi_d} digits" + ("" if name == "addition" else f" x {hi_c}")
            if all(math.isfinite(v) for v in c["corners"]):
                out.append(Claim.at_least(
                    f"{name}_coupled_fits_range",
                    f"{name}: the coupled model fits its training range (exact match at its hardest cell, "
                    f"{corner}), the premise of every extrapolation claim", mean(c["corners"]), FIT, source="ours",
                    note=f"exact match at {corner} per seed: {_seeds(c['corners'])}; {unit}; {tr}{at}"))
            if name == "addition" and all(math.isfinite(v) for v in c["at_2xs"]):
                out.append(Claim.at_least(
                    "addition_coupled_at_2x",
                    f"addition: Position Coupling adds operands twice the trained length ({2 * hi_d} digits) "
                    f"near-perfectly (exact match; the NeurIPS paper: trained to 30 digits, near-perfect to 200; "
                    f"'near-perfect' read as at least {th:g})",
                    mean(c["at_2xs"]), th, source="paper-read",
                    note=f"exact match at {2 * hi_d} digits per seed: {_seeds(c['at_2xs'])}; {unit}; {tr}{at}"))
            out.append(Claim.at_least(f"{name}_coupled_{'length' if name != 'multiplication' else 'a'}",
                                      f"{name}: multi-level Position Coupling generalises to about 2-3x the trained "
                                      f"{ax_d} (extrapolation factor; 'about 2-3x' read as at least 2)",
                                      mean(c["digits_factors"]), 2.0, source="paper-read",
                                      note=f"factor at ≥ {th:g} exact match per seed: {_seeds(c['digits_factors'])}; "
                                           f"{unit}; {tr}{at}"))
            if name != "addition":
                out.append(Claim.at_least(f"{name}_coupled_{'count' if name == 'multi_addition' else 'b'}",
                                          f"{name}: ... and to about 2-3x the trained {ax_c} ('about 2-3x' read as "
                                          f"at least 2)" if name == "multi_addition" else
                                          f"{name}: ... and to at least 2x the trained {ax_c} (ours: stricter than "
                                          f"the paper's ~15 digits of B from 10)", mean(c["count_factors"]),
                                          2.0, note=f"per seed: {_seeds(c['count_factors'])}; {unit}; {tr}{at}",
                                          source="paper-read" if name == "multi_addition" else "ours"))
        for method, r in mine.items():
            if method == "coupled":
                continue
            at = f"; sweep variant {r['variant']}" if r["variant"] else ""
            out.append(Claim.within(
                f"{name}_{method}_collapses",
                f"{name}: the {method} baseline fits its training range (every in-range cell ≥ {th:g} exact match: "
                + (f"its factor ≥ 1) but does not generalise past {BASELINE_COLLAPSE:g}x in {ax_d}" if name == "addition"
                   else f"both factors ≥ 1) but does not generalise past {BASELINE_COLLAPSE:g}x in both {ax_d} and "
                        f"{ax_c} (its smaller factor)")
                + f"; the paper's 'fails to generalise' read as at most {BASELINE_COLLAPSE:g}x",
                mean(r["smaller_factors"]), 1.0, BASELINE_COLLAPSE, source="paper-read",
                note=f"smaller factor per seed: {_seeds(r['smaller_factors'])} (below 1: it does not fit its range, "
                     f"so it cannot collapse); in-range accuracy {_seeds(r['in_ranges'])}; mean over "
                     f"{_n_seeds(r['seeds'])} (t interval); {tr}{at}"))
    return out


def report_md(metrics: dict[str, Any], cfg: Config) -> str:
    rows = summary(metrics)
    best = best_variants(rows)
    swept = any(r["variant"] for r in rows)
    lines = ["## Measurements", ""]
    if metrics.get("eval_only"):
        lines += [f"Re-evaluation of the models saved by {metrics['eval_only']} (no training).", ""]
    if metrics.get("eval_offsets"):
        lines += ["Scored with training-style random position offsets (a check: the official evaluation uses "
                  "none, as the default run does).", ""]
    for task in metrics["tasks"]:
        ax_d, ax_c = AXES[task["name"]]
        lines += [f"### {task['name']}", "",
                  f"Trained on {ax_d} {task['train_digits'][0]}-{task['train_digits'][1]}"
                  + (" (two operands)" if task["name"] == "addition" else
                     f", {ax_c} {task['train_count'][0]}-{task['train_count'][1]}")
                  + f"; exact match per cell of {task['eval_samples']} "
                  f"examples; factors at ≥ {metrics['threshold']:g}, measured per seed; the table gives their means "
                  "over seeds (the heat maps below average the seeds' grids).", "",
                  table(["method", "sweep variant", "seeds", f"{ax_d} factor",
                         *([] if task["name"] == "addition" else [f"{ax_c} factor"]), "accuracy in range",
                         "at its hardest cell", "at 2x the length", "accuracy beyond it (to 2x)"],
                        [[r["method"], (r["variant"] or "-")
                          + (" (best)" if swept and best[(r["task"], r["method"])] is r else ""),
                          str(r["seeds"]), f"{r['digits_factor']:.2f}",
                          *([] if task["name"] == "addition" else [f"{r['count_factor']:.2f}"]),
                          f"{r['in_range']:.3f}", f"{r['corner']:.3f}", f"{r['at_2x']:.3f}", f"{r['beyond_to_2x']:.3f}"]
                         for r in rows if r["task"] == task["name"]]), ""]
        for r in (r for (t, _), r in best.items() if t == task["name"]):
            grid = mean_grid(metrics["trials"], task["name"], r["method"], r["variant"])
            counts = task["eval_count"]
            at = f", its best sweep variant {r['variant']}" if r["variant"] else ""
            lines += [f"{r['method']}{at} ({ax_d} down, {ax_c} across):", "",
                      table(["", *(str(c) for c in counts)],
                            [[f"**{d}**", *(f"{grid.get((d, c), float('nan')):.2f}" for c in counts)]
                             for d in task["eval_digits"]]), ""]
    return "\n".join(lines)
