"""Figures for arith_coupling: an exact-match heat map per method and task (the paper's figure
type), with the training range outlined, and the training loss of every trial."""
from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from .analysis import AXES, best_variants, grid_cells, mean_grid, summary  # noqa: E402
from .config import Config  # noqa: E402


def heatmaps(metrics: dict[str, Any], task: dict[str, Any]):
    """One panel per method, at its best sweep variant."""
    shown = [r for (t, _), r in best_variants(summary(metrics)).items() if t == task["name"]]
    digits, counts = task["eval_digits"], task["eval_count"]
    fig, axes = plt.subplots(1, len(shown), figsize=(3.2 * len(shown) + 1, 3.4), squeeze=False)
    ax_d, ax_c = AXES[task["name"]]
    im = None
    for ax, row in zip(axes[0], shown):
        method = row["method"]
        grid = mean_grid(metrics["trials"], task["name"], method, row["variant"])
        A = np.array([[grid.get((d, c), np.nan) for c in counts] for d in digits])
        im = ax.imshow(A, vmin=0, vmax=1, cmap="viridis", origin="lower", aspect="auto")
        for i in range(len(digits)):
            for j in range(len(counts)):
                if np.isfinite(A[i, j]):
                    ax.text(j, i, f"{A[i, j]:.2f}"[1:] if A[i, j] < 1 else "1", ha="center", va="center", fontsize=6,
                            color="white" if A[i, j] < 0.6 else "black")
        inside_d = [i for i, d in enumerate(digits) if task["train_digits"][0] <= d <= task["train_digits"][1]]
        inside_c = [j for j, c in enumerate(counts) if task["train_count"][0] <= c <= task["train_count"][1]]
        if inside_d and inside_c:
            ax.add_patch(Rectangle((inside_c[0] - 0.5, inside_d[0] - 0.5), len(inside_c), len(inside_d), fill=False,
                                   ec="red", lw=1.5))
        fd, fc = row["digits_factor"], row["count_factor"]  # means of the seeds' factors, as the claims
        ax.set(xticks=range(len(counts)), xticklabels=counts, yticks=range(len(digits)), yticklabels=digits,
               xlabel=ax_c, title=f"{' '.join(filter(None, (method, row['variant'])))}\nfactors {fd:.2f}x / {fc:.2f}x")
    axes[0][0].set_ylabel(ax_d)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="exact match")
    fig.suptitle(f"{task['name']}: exact match (red: training range)", y=1.1)
    return fig


def length_curves(metrics: dict[str, Any], task: dict[str, Any]):
    """Two-operand addition: exact match against operand length, one line per method (its best
    sweep variant; the mean over seeds, each seed a thin line), the trained lengths shaded."""
    best = [r for (t, _), r in best_variants(summary(metrics)).items() if t == task["name"]]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    count = task["train_count"][1]
    for i, row in enumerate(best):
        color = f"C{i}"
        runs = [t for t in metrics["trials"] if t["task"] == task["name"] and t["method"] == row["method"]
                and t.get("variant", "") == row["variant"]]
        digits = task["eval_digits"]
        per = np.array([[grid_cells(t["grid"]).get((d, count), np.nan) for d in digits] for t in runs])
        for seed_curve in per:
            ax.plot(digits, seed_curve, color=color, lw=0.7, alpha=0.4)
        ax.plot(digits, np.nanmean(per, axis=0), color=color, lw=2, marker="o",
                label=f"{' '.join(filter(None, (row['method'], row['variant'])))} ({len(runs)} seeds)")
    lo, hi = task["train_digits"]
    ax.axvspan(lo, hi, color="grey", alpha=0.15, label="trained lengths")
    ax.axhline(metrics["threshold"], color="grey", ls=":", lw=1)
    ax.set(xlabel="operand length (digits)", ylabel="exact match", ylim=(-0.02, 1.02),
           title=f"{task['name']}: length generalisation (thin: seeds; thick: their mean)")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def loss_curves(metrics: dict[str, Any]):
    """Training loss and gradient norm (before clipping) of every trial."""
    fig, (ax, axg) = plt.subplots(1, 2, figsize=(12, 4))
    for t in metrics["trials"]:
        if t.get("curve"):
            cols = np.array(t["curve"], float).T  # step, loss[, grad norm]
            label = " / ".join(x for x in (t["task"], t["method"], t.get("variant", ""), f"seed {t['seed']}") if x)
            ax.plot(cols[0], cols[1], label=label, lw=1)
            if len(cols) > 2:
                axg.plot(cols[0], cols[2], lw=1)
    ax.set(yscale="log", xlabel="step", ylabel="training loss per target token", title="training loss")
    axg.set(yscale="log", xlabel="step", ylabel="gradient norm", title="gradient norm before clipping")
    for a in (ax, axg):
        a.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def plot_all(metrics: dict[str, Any], cfg: Config) -> dict[str, Any]:
    figs = {}
    for t in metrics["tasks"]:
        if not any(r["task"] == t["name"] for r in metrics["trials"]):
            continue
        if len(t["eval_count"]) == 1:  # one axis (two-operand addition): a curve, not a map
            figs[f"length_{t['name']}"] = length_curves(metrics, t)
        else:
            figs[f"heatmap_{t['name']}"] = heatmaps(metrics, t)
    if any(t.get("curve") for t in metrics["trials"]):
        figs["loss_curves"] = loss_curves(metrics)
    return figs
