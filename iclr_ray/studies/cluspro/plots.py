"""cluspro's figures: the seen-unseen curve per method and world (the calibration sweep), the
validation AUC over training, and a 2-D projection of attribute features with their prototypes."""
from __future__ import annotations

from typing import Any

import numpy as np


def plot_all(metrics: dict[str, Any], cfg=None) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    worlds, methods = metrics["worlds"], metrics["methods"]
    figs = {}
    fig, axes = plt.subplots(1, len(worlds), figsize=(4.2 * len(worlds), 3.8), squeeze=False)
    for ax, w in zip(axes[0], worlds):
        for i, m in enumerate(methods):
            s, u = metrics["results"][w][m]["curve"]
            this = metrics["results"][w][m]["AUC"][0]
            mean = float(np.mean(metrics["results"][w][m]["AUC"]))
            ax.plot(u, s, color=f"C{i}", label=f"{m} (AUC {this:.3f}; mean over seeds {mean:.3f})",
                    drawstyle="steps-post")
        ax.set_xlabel("unseen accuracy")
        ax.set_ylabel("seen accuracy")
        ax.set_title(f"{w} attributes (first seed's curve)", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    figs["seen_unseen_curves"] = fig

    steps = metrics["curve_steps"]
    if steps:
        fig, axes = plt.subplots(1, len(worlds), figsize=(4.2 * len(worlds), 3.2), squeeze=False)
        for ax, w in zip(axes[0], worlds):
            for i, m in enumerate(methods):
                c = np.asarray(metrics["valid_curves"][w][m], float)
                ax.plot(steps, c.mean(0), color=f"C{i}", label=m)
            ax.set_xlabel("step")
            ax.set_ylabel("validation AUC (mean over seeds)")
            ax.set_title(f"{w} attributes", fontsize=9)
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        figs["valid_auc"] = fig

    shown = {w: p for w, p in metrics["projection"].items() if p}
    if shown:
        fig, axes = plt.subplots(1, len(shown), figsize=(4.2 * len(shown), 4.0), squeeze=False)
        for ax, (w, p) in zip(axes[0], shown.items()):
            xy, attr, par = np.asarray(p["xy"]), np.asarray(p["attr"]), np.asarray(p["parity"])
            for j, name in enumerate(p["attr_names"]):
                for q, marker in ((0, "o"), (1, "^")):
                    sel = (attr == j) & (par == q)  # the projection shows attributes 0 and 1
                    ax.scatter(xy[sel, 0], xy[sel, 1], s=6, marker=marker, color=f"C{j}", alpha=0.5,
                               label=f"{name}, {'even' if q == 0 else 'odd'} digits")
                pr = np.asarray(p["protos"][j])
                if len(pr):
                    ax.scatter(pr[:, 0], pr[:, 1], s=140, marker="*", color=f"C{j}", edgecolor="k",
                               label=f"{name} prototypes")
            ax.set_title(f"{w}: {p['method']} attribute features (PCA)", fontsize=9)
            ax.legend(fontsize=6)
        fig.tight_layout()
        figs["feature_projection"] = fig
    return figs
