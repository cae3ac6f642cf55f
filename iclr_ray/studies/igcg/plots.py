"""Figures for igcg: the target loss against step and against seconds per method, and the share of
runs that have succeeded by each step (the distribution of steps to success)."""
from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .analysis import method_names, select, steps_to_success  # noqa: E402


def _padded(runs: list[dict[str, Any]], budget: int) -> np.ndarray:
    """[runs, budget + 1] loss per step; a run that stopped at success keeps its last loss."""
    out = np.empty((len(runs), budget + 1))
    for i, r in enumerate(runs):
        loss = np.asarray(r["loss"], float)
        out[i, :len(loss)] = loss
        out[i, len(loss):] = loss[-1]
    return out


def loss_curves(metrics: dict[str, Any]):
    budget = metrics["budget"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    for i, (name, method, K, init) in enumerate(method_names(metrics)):
        runs = list(select(metrics, method, K, init).values())
        if not runs:
            continue
        color = f"C{i}"
        loss = _padded(runs, budget)
        x = np.arange(budget + 1)
        ax1.plot(x, np.median(loss, 0), color=color, label=f"{name} (median of {len(runs)})")
        ax1.fill_between(x, *np.quantile(loss, [0.25, 0.75], axis=0), color=color, alpha=0.15)
        for j, r in enumerate(runs):
            t = r.get("cpu_seconds") or r["seconds"]
            ax2.plot(t, r["loss"], color=color, alpha=0.6, lw=1, label=name if j == 0 else None)
            if r["success_step"] is not None:
                ax2.plot(t[r["success_step"]], r["loss"][r["success_step"]], "o", color=color, ms=4)
    ax1.set(xlabel="step", ylabel="target loss (mean token CE)",
            title="loss per step (a run that succeeded keeps its last loss; band: IQR)")
    ax2.set(xlabel="CPU seconds", ylabel="target loss", title="each run against CPU time (dot: success)")
    for ax in (ax1, ax2):
        ax.set_yscale("log")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def success_by_step(metrics: dict[str, Any]):
    budget = metrics["budget"]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    x = np.arange(budget + 1)
    for i, (name, method, K, init) in enumerate(method_names(metrics)):
        runs = list(select(metrics, method, K, init).values())
        if not runs:
            continue
        done = np.array([steps_to_success(r, budget) if r["success_step"] is not None else budget + 1 for r in runs])
        ax.step(x, [(done <= t).mean() for t in x], where="post", color=f"C{i}", label=name)
    ax.set(xlabel="step", ylabel="share of runs succeeded", ylim=(-0.02, 1.02),
           title=f"steps to success (budget {budget}; a run never succeeding stays off)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_all(metrics: dict[str, Any], cfg=None) -> dict[str, Any]:
    return {"loss": loss_curves(metrics), "steps_to_success": success_by_step(metrics)}
