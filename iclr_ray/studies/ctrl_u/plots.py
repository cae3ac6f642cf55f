"""ctrl_u's figures: the sample grid (condition, real image, the base, and each arm's image with the
oracle's reading), the oracle's mIoU over post-training per arm, and the final scores per model."""
from __future__ import annotations

from typing import Any

import numpy as np

from .data import CLASSES, TEXTURES

ARM_COLOURS = {"base": "0.5", "controlnet": "tab:blue", "reward": "tab:orange", "ctrl_u": "tab:green"}


def _colour_mask(mask: np.ndarray) -> np.ndarray:
    palette = np.array([TEXTURES[c][0] for c in range(CLASSES)])
    shade = np.linspace(0.6, 1.0, CLASSES)  # paired classes share a colour: shade them apart
    return np.clip(palette[mask] * shade[mask][..., None], 0, 1)


def plot_all(metrics: dict[str, Any], cfg=None) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .analysis import hacking_gap, per_seed

    figs = {}
    grids = metrics["grids"]
    models = [m for m in ["base", *metrics["arms"]] if m in grids]
    masks = np.asarray(grids["masks"], np.uint8)
    n = len(masks)
    cols = 2 + 2 * len(models)
    fig, axes = plt.subplots(n, cols, figsize=(1.05 * cols, 1.1 * n), squeeze=False)
    for i in range(n):
        panels = [("condition", _colour_mask(masks[i])), ("real", np.asarray(grids["real"][i], np.uint8))]
        for m in models:
            panels += [(m, np.asarray(grids[m]["images"][i], np.uint8)),
                       (f"{m}: oracle", _colour_mask(np.asarray(grids[m]["oracle"][i], np.uint8)))]
        for ax, (title, img) in zip(axes[i], panels):
            ax.imshow(img, interpolation="nearest")
            if i == 0:
                ax.set_title(title, fontsize=6)
    for ax in axes.ravel():
        ax.axis("off")
    fig.suptitle("Held-out conditions, the real scene, and each model's image (first seed) with the oracle's "
                 "segmentation of it", fontsize=8)
    fig.tight_layout()
    figs["sample_grid"] = fig

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), squeeze=False)
    ablation = list(metrics.get("ablation", {}))
    for arm in [*metrics["arms"], *ablation]:
        for j, (ax, name) in enumerate(zip(axes[0], ("oracle", "reward model"))):
            for k, curve in enumerate(metrics["curves"][arm].values()):
                c = np.asarray(curve, float)
                if len(c):
                    ax.plot(c[:, 0], c[:, 1 + j], color=ARM_COLOURS.get(arm, "tab:purple"), alpha=0.8, marker="o", ms=3,
                            label=arm if k == 0 else None)
            ax.set_title(f"{name}'s mIoU on images drawn during post-training", fontsize=9)
            ax.set_xlabel("post-training step")
            ax.set_ylabel("mIoU")
    if "base" in metrics["scores"]:
        axes[0, 0].axhline(float(per_seed(metrics, "base", "oracle_miou").mean()), color="0.5", ls="--", lw=1,
                           label="base (full evaluation)")
    for ax in axes[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    figs["miou_over_training"] = fig

    models = [m for m in ["base", *metrics["arms"], *ablation] if m in metrics["scores"]]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    for ax, (title, values) in zip(axes, (
            ("oracle mIoU (controllability)", lambda m: per_seed(metrics, m, "oracle_miou")),
            ("reward mIoU - oracle mIoU (hacking gap)", lambda m: hacking_gap(metrics, m)),
            ("Fréchet distance to real (oracle features)", lambda m: per_seed(metrics, m, "fid")))):
        for x, m in enumerate(models):
            v = values(m)
            ax.bar(x, v.mean(), color=ARM_COLOURS.get(m, "tab:purple"), alpha=0.7)
            ax.scatter(np.full(len(v), x), v, color="k", s=8, zorder=3)
        ax.set_xticks(range(len(models)), models, fontsize=7, rotation=20)
        ax.set_title(title, fontsize=9)
    axes[2].axhline(metrics["fid_real_halves"], color="0.3", ls=":", lw=1, label="real vs real")
    axes[2].legend(fontsize=7)
    fig.suptitle("Scores per model (bars: mean over seeds; dots: seeds)", fontsize=9)
    fig.tight_layout()
    figs["scores"] = fig
    return figs
