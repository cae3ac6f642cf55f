"""Figures for sft_recipe: loss curves, early profile vs final score, the batch x lr heat map,
warmup/schedule scores and phased vs stacked held-out loss."""
from __future__ import annotations

import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .config import Config  # noqa: E402


def _finished(trials, experiment=None):
    return [t for t in trials if t["finished"] and (experiment is None or experiment in t["experiments"])]


def loss_curves(trials) -> plt.Figure:
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for t in _finished(trials, "grid") or _finished(trials):
        c = t["curve"]
        a.plot([s["samples"] for s in c], [s["loss"] for s in c], lw=1, label=f"b{t['batch']} lr{t['lr']:g}")
        ev = [s for s in c if "eval_loss" in s]
        b.plot([s["samples"] for s in ev], [s["eval_loss"] for s in ev], marker=".", lw=1)
    a.set(xlabel="training rows seen", ylabel="training loss / token", title="SFT training loss (grid)", yscale="log")
    b.set(xlabel="training rows seen", ylabel="held-out loss / token", title="held-out loss (grid)")
    a.legend(fontsize=7, ncol=2)
    for ax in (a, b):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def early_vs_score(trials, metrics, window_rows: int) -> plt.Figure:
    pts = [t for t in trials if t["finished"] and {"grid", "warmup"} & set(t["experiments"])]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    e = metrics.get("early", {})
    for ax, key, rho, name in ((axes[0], "early_grad_norm", e.get("spearman_grad_norm"), "early grad norm"),
                               (axes[1], "early_loss", e.get("spearman_loss"), "early training loss")):
        sc = ax.scatter([t[key] for t in pts], [t["score"] for t in pts], c=[math.log10(t["lr"]) for t in pts],
                        s=[20 + 2 * t["batch"] ** 0.8 for t in pts], cmap="viridis")
        title = f"{name} over the first {window_rows} rows\nvs final score"
        if rho is not None and math.isfinite(rho):
            title += f" (Spearman {rho:+.2f})"
        ax.set(xlabel=name, ylabel="final score", title=title)
        ax.grid(alpha=0.3)
    fig.colorbar(sc, ax=axes, label="log10 lr (marker size: batch)")
    return fig


def _ordered(values) -> list:
    values = set(values)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    return sorted(values) if numeric else sorted(values, key=str)


def mean_heatmap(points: list[tuple], ylabel: str, xlabel: str, title: str) -> plt.Figure | None:
    """A heat map of the mean value per (y, x) cell of ``points`` = [(y, x, value), ...]."""
    if not points:
        return None
    ys, xs = _ordered(p[0] for p in points), _ordered(p[1] for p in points)
    z = np.full((len(ys), len(xs)), np.nan)
    for i, y in enumerate(ys):
        for j, x in enumerate(xs):
            vals = [v for py, px, v in points if py == y and px == x]
            if vals:
                z[i, j] = float(np.mean(vals))
    fig, ax = plt.subplots(figsize=(1.6 * len(xs) + 2, 1.1 * len(ys) + 1.5))
    im = ax.imshow(z, cmap="viridis", origin="lower", aspect="auto")
    for i in range(len(ys)):
        for j in range(len(xs)):
            if np.isfinite(z[i, j]):
                ax.text(j, i, f"{z[i, j]:.3f}", ha="center", va="center", color="w", fontsize=9)
    ax.set_xticks(range(len(xs)), [f"{x:g}" if isinstance(x, float) else str(x) for x in xs])
    ax.set_yticks(range(len(ys)), [str(y) for y in ys])
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    return fig


def grid_heatmap(trials) -> plt.Figure | None:
    return mean_heatmap([(t["batch"], t["lr"], t["score"]) for t in _finished(trials, "grid")],
                        "effective batch (rows)", "learning rate", "final score, equal sample budget")


def sweep_heatmap(rows, keys: list[str], metric: str) -> plt.Figure | None:
    """Mean ``metric`` over trials at each pair of the two swept values (a sweep's heat map)."""
    return mean_heatmap([(r["params"][keys[0]], r["params"][keys[1]], r[metric]) for r in rows
                         if r.get(metric) is not None], keys[0], keys[1],
                        f"{metric} (finished trials; stopped ones blank)")


def warmup_schedule(trials) -> plt.Figure | None:
    warm = _finished(trials, "warmup")
    if len(warm) < 2:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = [f"{t['schedule']}\nwarmup {t['warmup_steps']}" for t in warm]
    ax.bar(range(len(warm)), [t["score"] for t in warm], color="tab:blue")
    ax.set_xticks(range(len(warm)), labels, fontsize=8)
    ax.set(ylabel="final score", title="warmup and schedule")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def phased_vs_stacked(trials) -> plt.Figure | None:
    ph = {t["order"]: t for t in _finished(trials, "phased")}
    if len(ph) < 2:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for order, color in (("stacked", "tab:blue"), ("phased", "tab:red")):
        c = [s for s in ph[order]["curve"] if "eval_loss" in s]
        for key, style in (("eval_loss", "-"), ("eval_loss_knowledge", ":"), ("eval_loss_skills", "--")):
            ax.plot([s["samples"] for s in c], [s[key] for s in c], style, color=color,
                    label=f"{order}: {key.replace('eval_loss', 'held-out').replace('_', ' ')}")
    ax.set(xlabel="training rows seen", ylabel="held-out loss / token",
           title="phased (knowledge, then skills) vs stacked")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_all(metrics: dict[str, Any], cfg: Config) -> dict[str, Any]:
    trials = metrics["trials"]
    figs = {"loss_curves": loss_curves(trials),
            "early_vs_score": early_vs_score(trials, metrics, cfg.early.window_rows),
            "grid_heatmap": grid_heatmap(trials), "warmup_schedule": warmup_schedule(trials),
            "phased_vs_stacked": phased_vs_stacked(trials)}
    return {name: fig for name, fig in figs.items() if fig is not None}
