"""molt5_3d's figures: test MAE per target and variant, and the validation learning curves."""
from __future__ import annotations

from typing import Any

import numpy as np

from .data import TARGETS


def plot_all(metrics: dict[str, Any], cfg=None) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants, targets = metrics["variants"], metrics["targets"]
    figs = {}
    fig, axes = plt.subplots(1, len(targets), figsize=(3.2 * len(targets), 3.2), squeeze=False)
    for ax, t in zip(axes[0], targets):
        vals = [np.asarray(metrics["test_mae"][v][t], float) for v in variants]
        ax.bar(range(len(variants)), [x.mean() for x in vals], yerr=[x.std() for x in vals], capsize=3,
               color=[f"C{i}" for i in range(len(variants))])
        for name, ref in metrics["reference"].items():
            ax.axhline(ref[t], ls="--" if name == "ridge_e3fp" else ":", color="k", lw=1, label=name)
        ax.set_xticks(range(len(variants)), variants, rotation=30)
        ax.set_title(TARGETS[t], fontsize=9)
        ax.set_ylabel("test MAE")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("QM9 test MAE per target and fusion variant (mean ± sd over seeds)")
    fig.tight_layout()
    figs["mae_by_variant"] = fig

    steps = metrics["curve_steps"]
    if steps:
        fig, axes = plt.subplots(1, len(targets), figsize=(3.2 * len(targets), 3.0), squeeze=False)
        for ax, t in zip(axes[0], targets):
            for i, v in enumerate(variants):
                c = np.asarray(metrics["valid_curves"][v][t], float)
                ax.plot(steps, c.mean(0), color=f"C{i}", label=v)
            if metrics["pretrain_steps"]:
                ax.axvline(metrics["pretrain_steps"], color="grey", ls=":", lw=1)
            ax.set_title(TARGETS[t], fontsize=9)
            ax.set_xlabel("step (dotted: end of pretraining)")
            ax.set_ylabel("valid MAE")
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        figs["learning_curves"] = fig
    return figs
