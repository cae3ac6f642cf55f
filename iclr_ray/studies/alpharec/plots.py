"""alpharec's figures: pure functions of the metrics."""
from __future__ import annotations

from typing import Any

import numpy as np

from .analysis import ID_MODELS, model_name, sel


def plot_convergence(metrics: dict[str, Any]):
    """Test Recall@K against the epoch per model (mean over seeds, the band their range)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric, title in ((axes[0], "test_recall", "test"), (axes[1], "valid_recall", "validation")):
        for m, v in metrics["models"].items():
            if v["world"] != "full":
                continue
            c = v["curves"]
            x, y = np.asarray(c["epoch"][0]), np.asarray(c[metric])
            line, = ax.plot(x, y.mean(0), label=model_name(m), lw=1.5,
                            ls="--" if m in ID_MODELS else "-")
            ax.fill_between(x, y.min(0), y.max(0), color=line.get_color(), alpha=0.15)
        ax.set_xlabel("epoch")
        ax.set_ylabel(f"{title} Recall@{metrics['k']}")
        ax.set_title(f"{title} Recall@{metrics['k']} per epoch ({metrics['seeds']} seeds)")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_models(metrics: dict[str, Any]):
    """Test Recall@K and NDCG@K per model at each seed's early-stopping epoch (the dots: seeds)."""
    import matplotlib.pyplot as plt

    full = [m for m, v in metrics["models"].items() if v["world"] == "full"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric in zip(axes, ("test_recall", "test_ndcg")):
        vals = [sel(metrics, m, metric) for m in full]
        ax.bar(range(len(full)), [v.mean() for v in vals], color="#9ab")
        for j, v in enumerate(vals):
            ax.plot(np.full(len(v), j), v, "k.", ms=4)
        ax.set_xticks(range(len(full)), [model_name(m) for m in full], rotation=25, ha="right", fontsize=8)
        lo = min(v.min() for v in vals)
        ax.set_ylim(0.8 * lo, 1.05 * max(v.max() for v in vals))
        ax.set_ylabel(f"{metric.replace('test_', 'test ').replace('recall', 'Recall').replace('ndcg', 'NDCG')}"
                      f"@{metrics['k']}")
    fig.suptitle("Full-ranking test metrics at each seed's best validation epoch")
    fig.tight_layout()
    return fig


def plot_zero_shot(metrics: dict[str, Any]):
    """Recall@K on items never trained on, against random ranking."""
    import matplotlib.pyplot as plt

    zs = metrics["zero_shot"]
    zero = [m for m, v in metrics["models"].items() if v["world"] == "zero"]
    vals = [sel(metrics, m, "zero_recall") for m in zero]
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.bar(range(len(zero)), [v.mean() for v in vals], color=["#4a8" if "alpharec" in m else "#999" for m in zero])
    for j, v in enumerate(vals):
        ax.plot(np.full(len(v), j), v, "k.", ms=4)
    ax.axhline(zs["random_recall"], color="r", ls="--", lw=1, label="random ranking")
    ax.set_xticks(range(len(zero)), [model_name(m) for m in zero], fontsize=8)
    ax.set_ylabel(f"Recall@{metrics['k']} on unseen items")
    ax.set_title(f"Zero-shot: {zs['items']} unseen items ({', '.join(zs['genres'])})", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_all(metrics: dict[str, Any], cfg=None) -> dict[str, Any]:
    out = {"convergence": plot_convergence(metrics), "models": plot_models(metrics)}
    if metrics.get("zero_shot"):
        out["zero_shot"] = plot_zero_shot(metrics)
    return out
