"""moee's figures: pure functions of the metrics."""
from __future__ import annotations

from typing import Any

import numpy as np

from .analysis import VIEW_NAMES, score_table


def plot_scores(metrics: dict[str, Any]):
    """Per task: HS, RW, concat, sum, the untrained routers' sum (and the reference model)."""
    import matplotlib.pyplot as plt

    table = score_table(metrics)
    views = [v for v in ("hs_raw", "hs", "rw", "concat", "sum", "sum_untrained")
             if any(v in r for r in table.values())] + (["reference"] if any("reference" in r for r in
                                                                                   table.values()) else [])
    names = list(table)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.8 * len(names)), 4))
    width = 0.8 / len(views)
    for j, v in enumerate(views):
        ax.bar(np.arange(len(names)) + (j - (len(views) - 1) / 2) * width, [table[n].get(v, np.nan) for n in names],
               width, label=VIEW_NAMES.get(v, "all-MiniLM-L6-v2"))
    ax.set_xticks(np.arange(len(names)), names, rotation=15, fontsize=8)
    top = np.nanmax([table[n].get(v, np.nan) for n in names for v in views])
    ax.set_ylim(min(0.0, np.nanmin([table[n].get(v, np.nan) for n in names for v in views])), 1.3 * top)
    ax.set_ylabel("score x 100")
    ax.set_title(f"HS, RW and MoEE per task (alpha {metrics['alpha']:g}, mean of {len(metrics['models'])} models)")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    return fig


def plot_alpha(metrics: dict[str, Any]):
    """MoEE (sum) against alpha, per task (alpha 0 is z-scored HS alone): test units solid, dev
    units dashed, the alpha the claims use marked."""
    import matplotlib.pyplot as plt

    sw = metrics["sweep"]
    dev = sw.get("per_task_dev") or {}
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, per in sw["per_task"].items():
        line, = ax.plot(sw["alphas"], [100 * float(np.mean(v)) for v in per], marker="o", label=name)
        if name in dev:
            ax.plot(sw["alphas"], [100 * float(np.mean(v)) for v in dev[name]], ls="--", color=line.get_color(),
                    alpha=0.6)
    ax.axvline(metrics["alpha"], color="grey", lw=0.8, ls=":")
    ax.set_xlabel("alpha (weight of cos RW)")
    ax.set_ylabel("MoEE (sum) score x 100")
    ax.set_title(f"alpha sweep (mean over models; dashed: dev units; alpha {metrics['alpha']:g} "
                 f"{metrics.get('alpha_chosen', 'fixed')})", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_pretraining(metrics: dict[str, Any]):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for m, curve in metrics["pretrain"]["curves"].items():
        ax.plot([c["step"] for c in curve], [c["loss"] for c in curve], label=m)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats / token)")
    ax.set_title("MoE LM pre-training on the review corpus")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_all(metrics: dict[str, Any], cfg=None) -> dict[str, Any]:
    out = {"scores": plot_scores(metrics), "alpha_sweep": plot_alpha(metrics)}
    if metrics.get("pretrain"):
        out["pretraining"] = plot_pretraining(metrics)
    return out
