"""dreamweaver's figures: rollout strips (real frames beside the frames each model draws), the
block-factor importance matrices, DCI bars per model, and the training losses."""
from __future__ import annotations

from typing import Any

import numpy as np


def plot_all(metrics: dict[str, Any], cfg=None) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .analysis import per_seed

    figs = {}
    first = str(metrics["seeds"][0])
    objectives = metrics["objectives"]

    # rollout strips: per video, the real clip, then each model's drawn frames beside the frame it predicts
    strips = {o: metrics["imagination"][o][first]["strip"] for o in objectives}
    real = np.asarray(strips[objectives[0]]["real"], np.uint8)  # (n, T, S, S, 3)
    n, t_len = real.shape[:2]
    cols = t_len + sum(len(s["drawn"]) for s in strips.values())
    fig, axes = plt.subplots(n, cols, figsize=(1.1 * cols, 1.15 * n), squeeze=False)
    for i in range(n):
        col = 0
        for t in range(t_len):
            axes[i, col].imshow(real[i, t])
            if i == 0:
                axes[i, col].set_title(f"real t{t + 1}", fontsize=7)
            col += 1
        for o in objectives:
            for k, frames in enumerate(strips[o]["drawn"]):
                axes[i, col].imshow(np.asarray(frames[i], np.uint8))
                if i == 0:
                    axes[i, col].set_title(f"{o[:7]} t{strips[o]['offset'] + k + 1}", fontsize=7)
                col += 1
    for ax in axes.ravel():
        ax.axis("off")
    fig.suptitle("Rollouts (first seed): real clip; frames drawn from the last conditioning step's slots", fontsize=8)
    fig.tight_layout()
    figs["rollout_strips"] = fig

    models = [*objectives, *([metrics["baseline"]] if metrics.get("baseline") else []), "untrained"]
    shares = {}
    for m in models:
        r = np.asarray(metrics["dci"][m]["test"][first]["R"])
        shares[m] = r / np.maximum(r.sum(0, keepdims=True), 1e-12)
    top = max(max(float(r.max()) for r in shares.values()), 1e-6)  # one scale: 1 / M is an even spread
    fig, axes = plt.subplots(1, len(models), figsize=(2.9 * len(models) + 0.8, 3.4), squeeze=False,
                             constrained_layout=True)
    for ax, m in zip(axes[0], models):
        r = shares[m]
        im = ax.imshow(r, cmap="viridis", vmin=0, vmax=top, aspect="auto")
        ax.set_xticks(range(len(metrics["factors"])), metrics["factors"], rotation=45, fontsize=7)
        ax.set_yticks(range(r.shape[0]), [f"block {b}" for b in range(r.shape[0])], fontsize=7)
        ax.set_title(m, fontsize=9)
    fig.colorbar(im, ax=list(axes[0]), shrink=0.8, label="share of the factor's importance")
    fig.suptitle("Which block the trees read each factor from (first seed, test videos)", fontsize=9)
    figs["block_factor_importance"] = fig

    keys = [("static.D", "D static"), ("static.C", "C static"), ("I_static", "I static"),
            ("dynamic.C", "C dynamic"), ("I_dynamic", "I dynamic")]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    width = 0.8 / len(models)
    for i, m in enumerate(models):
        vals = [per_seed(metrics, m, k) for k, _ in keys]
        ax.bar(np.arange(len(keys)) + i * width, [v.mean() for v in vals], width,
               yerr=[v.std() for v in vals], label=m, color=f"C{i}", capsize=2)
    ax.set_xticks(np.arange(len(keys)) + width * (len(models) - 1) / 2, [k for _, k in keys], fontsize=8)
    ax.set_ylabel("test videos (mean ± sd over seeds)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    figs["dci_bars"] = fig

    fig, ax = plt.subplots(figsize=(5, 3))
    for i, o in enumerate(metrics["curves"]):
        for j, curve in enumerate(metrics["curves"][o]):
            if curve:
                c = np.asarray(curve, float)
                ax.plot(c[:, 0], c[:, 1], color=f"C{i}", alpha=0.7, label=o if j == 0 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (token CE + dVAE error)")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    fig.tight_layout()
    figs["training_loss"] = fig
    return figs
