"""Figures for orion: per-layer outcome curves of request patching (one figure per model, a panel
per task) and the oversight bar chart."""
from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .analysis import LABELS, OUTCOMES, judged, short_name  # noqa: E402

COLORS = {"r2c2": "tab:gray", "r1c2": "tab:blue", "r1c1": "tab:red"}


def layer_curves(ax, cell: dict[str, Any], judged_cell: bool) -> None:
    pl = cell["per_layer"]
    x = pl["layers"]
    for key in OUTCOMES:
        ax.plot(x, [np.mean(v) if len(v) else np.nan for v in pl[key]], color=COLORS[key], marker=".", label=LABELS[key])
    ax.plot(x, [np.mean(v) if len(v) else np.nan for v in pl["p_r1c2"]], color="tab:blue", ls="--", alpha=0.7,
            label="p(R1(C2)) patched")
    ax.plot(x, [np.mean(v) if len(v) else np.nan for v in pl["unrelated_r1c2"]], color="k", ls=":",
            label="R1(C2), unrelated-residual control")
    if cell.get("selected_layer") is not None:
        ax.axvline(cell["selected_layer"], color="tab:blue", alpha=0.3, lw=4)
    note = "" if judged_cell else " (not judged)"
    ax.set(title=f"{cell['task']}: acc {cell['accuracy']:.2f}, {len(cell['pairs'])} pairs{note}", xlabel="layer L",
           ylim=(-0.03, 1.03))
    ax.grid(alpha=0.3)


def oversight_bars(ax, over: dict[str, Any]) -> None:
    models = list(over)
    keys = [("no_distractor", "no distractor", "tab:green"), ("plain", "distracted", "tab:red"),
            ("patched", "distracted + trusted patch", "tab:blue")]
    w = 0.8 / len(keys)
    for j, (k, label, color) in enumerate(keys):
        means = [np.mean(over[m][k]) for m in models]
        # 95% Wilson-like error bar: normal approximation of a share over the stories
        errs = [1.96 * np.sqrt(max(p * (1 - p), 1e-9) / max(len(over[m][k]), 1)) for m, p in zip(models, means)]
        ax.bar(np.arange(len(models)) + (j - 1) * w, means, w, yerr=errs, capsize=3, color=color, label=label)
    ax.set_xticks(np.arange(len(models)), [m.split("/")[-1] for m in models])
    ax.set(ylabel="accuracy (city question)", ylim=(0, 1.05),
           title="oversight: " + ", ".join(f"{m.split('/')[-1]} L={over[m]['layer']}" for m in models))
    ax.legend(fontsize=8)


def oversight_layers(ax, over: dict[str, Any]) -> None:
    """Accuracy on distracted stories with the trusted residual patched at each layer (relative
    depth, so models of different depth share the axis); L* marked."""
    for model, o in over.items():
        if not o.get("by_layer"):
            continue
        n = len(o["by_layer"])
        depth = np.arange(n) / max(n - 1, 1)
        line, = ax.plot(depth, [np.mean(v) for v in o["by_layer"]], marker=".", label=model.split("/")[-1])
        ax.axhline(np.mean(o["plain"]), color=line.get_color(), ls=":", alpha=0.7)
        ax.axvline(o["layer"] / max(n - 1, 1), color=line.get_color(), alpha=0.3, lw=4)
    ax.set(xlabel="patched layer / last layer", ylabel="accuracy, distracted + patch", ylim=(-0.03, 1.03),
           title="oversight by layer (dotted: unpatched; band: L*)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_all(metrics: dict[str, Any], cfg) -> dict[str, Any]:
    figs = {}
    for model in metrics["models"]:
        cells = [c for c in metrics["cells"] if c["model"] == model]
        if not cells:
            continue
        cols = min(3, len(cells))
        rows = int(np.ceil(len(cells) / cols))
        fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
        for ax, cell in zip(axes.flat, cells):
            layer_curves(ax, cell, judged(cell, cfg))
        for ax in list(axes.flat)[len(cells):]:
            ax.axis("off")
        axes[0, 0].set_ylabel("share of pairs / probability")
        axes.flat[0].legend(fontsize=7, loc="center left")
        fig.suptitle(f"request patching, {model}", y=1.0)
        fig.tight_layout()
        figs[f"layers_{short_name(model)}"] = fig
    if metrics.get("oversight"):
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(5.5 + 2.2 * len(metrics["oversight"]), 4))
        oversight_bars(ax, metrics["oversight"])
        oversight_layers(ax2, metrics["oversight"])
        fig.tight_layout()
        figs["oversight"] = fig
    return figs
