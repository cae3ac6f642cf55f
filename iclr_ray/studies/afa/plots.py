"""afa's figures: generated digits per model (one per class, first seed), AFA's aggregation maps over
timesteps at every location, the right expert's weight over timesteps, held-out MSE against the
number of experts, the scores per model, and the training losses."""
from __future__ import annotations

from typing import Any

import numpy as np


def plot_all(metrics: dict[str, Any], cfg=None) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .analysis import generated, owner, per_seed, right_weight_by_t, size_curve

    figs = {}
    grids = metrics["grids"]
    rows = ["real", *[m for m in metrics["scores"] if m in grids]]
    fig, axes = plt.subplots(len(rows), 10, figsize=(8, 0.85 * len(rows)), squeeze=False)
    for r, name in enumerate(rows):
        imgs = np.asarray(grids[name], float)
        for k in range(10):
            ax = axes[r][k]
            if k < len(imgs):
                ax.imshow(imgs[k], cmap="gray", vmin=0, vmax=1, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if k == 0:
                ax.set_ylabel(name, fontsize=6, rotation=0, ha="right", va="center")
    fig.suptitle("One digit per class: real, and each model's (DDIM with CFG, first seed, same noise)", fontsize=8)
    fig.tight_layout()
    figs["sample_grid"] = fig

    maps = metrics.get("maps")
    if maps:
        own = owner(metrics)
        locs = list(maps["maps"][0])
        n_d, n_t = len(maps["labels"]), len(maps["timesteps"])
        fig, axes = plt.subplots(n_d * n_t, len(locs), figsize=(1.0 * len(locs), 1.0 * n_d * n_t), squeeze=False)
        for d, label in enumerate(maps["labels"]):
            for ti, t in enumerate(maps["timesteps"]):
                r = d * n_t + ti
                for li, loc in enumerate(locs):
                    a = np.asarray(maps["maps"][ti][loc][d])[own[label]]
                    ax = axes[r][li]
                    ax.imshow(a, cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
                    ax.set_xticks([])
                    ax.set_yticks([])
                    if r == 0:
                        ax.set_title(loc, fontsize=5)
                    if li == 0:
                        ax.set_ylabel(f"digit {label}\nt={t}", fontsize=6)
        fig.suptitle("AFA's maps: the weight on the expert trained on the digit's class, per location (yellow = 1)",
                     fontsize=8)
        fig.tight_layout()
        figs["aggregation_maps"] = fig

    byt = right_weight_by_t(metrics)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    centres = (np.arange(len(byt)) + 0.5) * 1000 / len(byt)
    ax.plot(centres, byt, marker="o", label="AFA")
    ax.axhline(1 / metrics["n_experts"], color="0.5", ls="--", label="uniform")
    ax.set_xlabel("timestep t")
    ax.set_ylabel("weight on the right expert")
    ax.set_title("Routing over timesteps (held-out digits, all locations, seeds)", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    figs["routing_over_t"] = fig

    curve = size_curve(metrics)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for name, pts in curve.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xlabel("number of experts (the first k)")
    ax.set_ylabel("held-out eps MSE")
    ax.set_xticks(sorted({p[0] for pts in curve.values() for p in pts}))
    ax.legend(fontsize=7)
    ax.set_title("MSE against the number of experts", fontsize=8)
    fig.tight_layout()
    figs["mse_vs_experts"] = fig

    gen = generated(metrics)
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    for ax, key in zip(axes, ("mse", "fid", "accuracy")):
        vals = [per_seed(metrics, m, key) for m in gen]
        ax.bar(range(len(gen)), [v.mean() for v in vals], yerr=[v.std() for v in vals], capsize=2,
               color=["tab:green" if m == "afa" else "tab:blue" if m.startswith("expert") else "tab:orange"
                      for m in gen])
        ax.set_xticks(range(len(gen)))
        ax.set_xticklabels(gen, rotation=45, ha="right", fontsize=7)
        ax.set_title({"mse": "held-out MSE", "fid": "Fréchet distance", "accuracy": "class accuracy"}[key], fontsize=8)
    fig.tight_layout()
    figs["scores"] = fig

    fig, ax = plt.subplots(figsize=(5, 3.2))
    for name, curve_ in metrics["loss"].items():
        if name.startswith("afa_") and curve_:
            ax.plot([p[0] for p in curve_], [p[1] for p in curve_], lw=0.8,
                    color="tab:green" if "main" in name else "tab:red" if "control" in name else "tab:purple",
                    label=name.split("-seed")[0] if name.endswith(f"seed{metrics['seeds'][0]}") else None)
    ax.set_xlabel("aggregator step")
    ax.set_ylabel("training eps MSE")
    ax.legend(fontsize=7)
    ax.set_title("Aggregator training (the experts frozen)", fontsize=8)
    fig.tight_layout()
    figs["aggregator_loss"] = fig
    return figs
