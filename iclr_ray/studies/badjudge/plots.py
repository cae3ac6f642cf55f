"""Figures for badjudge: ASR, inflation and clean accuracy against the poison rate per access
level; each poisoned judge before and after merging; the scores the adversary's triggered poor
answers get; the training loss of each trial."""
from __future__ import annotations

import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ...claims import mean  # noqa: E402
from .analysis import label, per_seed, poisoned_pointwise, trials  # noqa: E402
from .evaluate import strongest  # noqa: E402


def _err(values: np.ndarray) -> tuple[float, float, float]:
    e = mean(values)
    if e.ci is None or not all(map(math.isfinite, e.ci)):
        return e.value, 0.0, 0.0
    return e.value, e.value - e.ci[0], e.ci[1] - e.value


def by_rate(metrics: dict[str, Any]):
    s = metrics["settings"]
    rates = [0.0, *sorted(s["rates"])]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for level in s["levels"]:
        for ax, key in zip(axes, ("asr", "ratio", "acc")):
            pts = [_err(per_seed(metrics, "pointwise-clean" if r == 0 else label("pointwise", level, r), key))
                   for r in rates]
            ax.errorbar([100 * r for r in rates], [p[0] for p in pts], yerr=[[p[1] for p in pts], [p[2] for p in pts]],
                        marker="o", capsize=3, label=level)
    for ax, title in zip(axes, ("ASR (triggered poor answer scored 5)", "score inflation (triggered / legitimate)",
                                "clean accuracy")):
        ax.set(xlabel="poisoned share of training data (%)", title=title)
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xticks([100 * r for r in rates], [f"{100 * r:g}" for r in rates])
        ax.grid(alpha=0.3)
    axes[1].axhline(1, color="grey", lw=0.8)
    axes[0].legend(title="access level", fontsize=8)
    fig.suptitle("pointwise judges: mean and 95% interval over seeds", fontsize=10)
    fig.tight_layout()
    return fig


def merging(metrics: dict[str, Any]):
    s = metrics["settings"]
    judges = poisoned_pointwise(metrics)
    variants = [("alone", "{j}")] + [(m, f"merge-{m}-{{j}}") for m in s["merge"]["methods"]]
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 1.4 * len(judges) + 4), 4))
    width = 0.8 / len(variants)
    for k, (name, pattern) in enumerate(variants):
        for ax, key in zip(axes, ("asr", "acc")):
            pts = [_err(per_seed(metrics, pattern.format(j=j), key)) for j in judges]
            xs = np.arange(len(judges)) + (k - (len(variants) - 1) / 2) * width
            ax.bar(xs, [p[0] for p in pts], width, yerr=[[p[1] for p in pts], [p[2] for p in pts]], capsize=2,
                   label=name)
    strong = strongest(judges)
    for k, m in enumerate(s["merge"]["methods"]):
        v = per_seed(metrics, f"merge2-{m}-{strong}", "asr")
        if np.isfinite(v).any():
            x = judges.index(strong) + (k + 1 - (len(variants) - 1) / 2) * width
            axes[0].scatter([x], [np.nanmean(v)], marker="x", color="k", zorder=5,
                            label="merged with a poisoned pairwise judge" if k == 0 else None)
    clean = per_seed(metrics, "pointwise-clean", "asr")
    axes[0].axhline(np.nanmean(clean), color="grey", ls="--", lw=0.8, label="clean judge")
    axes[1].axhline(np.nanmean(per_seed(metrics, "pointwise-clean", "acc")), color="grey", ls="--", lw=0.8)
    for ax, title in zip(axes, ("ASR", "clean accuracy")):
        ax.set_xticks(range(len(judges)), [j.replace("pointwise-", "") for j in judges], rotation=30, fontsize=8)
        ax.set(title=title)
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=7)
    fig.suptitle("poisoned pointwise judges before and after merging with a pairwise judge", fontsize=10)
    fig.tight_layout()
    return fig


def score_histograms(metrics: dict[str, Any]):
    judges = ["pointwise-clean", strongest(poisoned_pointwise(metrics))]
    judges += [f"merge-{m}-{judges[1]}" for m in metrics["settings"]["merge"]["methods"]]
    fig, axes = plt.subplots(1, len(judges), figsize=(3.2 * len(judges), 3), sharey=True)
    for ax, j in zip(np.atleast_1d(axes), judges):
        for key, name in (("hist_clean", "poor answer"), ("hist_triggered", "poor answer + trigger")):
            h = np.sum([r["judges"][j][key] for r in trials(metrics) if j in r["judges"]], axis=0)
            if np.ndim(h) == 0:
                continue
            ax.bar(np.arange(1, 6) + (-0.2 if key == "hist_clean" else 0.2), h / max(h.sum(), 1), 0.4, label=name)
        ax.set(title=j, xlabel="score given")
        ax.title.set_fontsize(8)
    np.atleast_1d(axes)[0].set_ylabel("share of the adversary's answers")
    np.atleast_1d(axes)[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def training(metrics: dict[str, Any]):
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for r in metrics["trials"]:
        c = r["curve"]
        ax.plot([p["step"] for p in c], [p["loss"] for p in c], label=r["label"])
    ax.set(xlabel="step", ylabel="cross-entropy per verdict (all judges)", title="judge fine-tuning, per trial")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_all(metrics: dict[str, Any], cfg=None) -> dict[str, Any]:
    return {"asr_vs_rate": by_rate(metrics), "merging": merging(metrics), "scores": score_histograms(metrics),
            "training": training(metrics)}
