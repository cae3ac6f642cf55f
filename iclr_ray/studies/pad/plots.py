"""Figures for pad: alignment per preference and decoder, alignment against PAD's weight, the PRMs'
DPO loss curves, and speed against alignment."""
from __future__ import annotations

import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .analysis import METHODS, alignment_table, mean_over, sweep_curve, throughput  # noqa: E402


def alignment(metrics: dict[str, Any]):
    rows = alignment_table(metrics)
    names = list(dict.fromkeys(r["preference"] for r in rows))
    methods = [m for m, _ in METHODS if any(r["method"] == m for r in rows)]
    labels = dict(METHODS)
    fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(names)), 4))
    width = 0.8 / len(methods)
    for j, m in enumerate(methods):
        xs, ys, lo, hi = [], [], [], []
        for i, n in enumerate(names):
            e = next((r["est"] for r in rows if r["preference"] == n and r["method"] == m), None)
            if e is None:  # not decoded for this preference (the shuffled control: trained ones only)
                continue
            xs.append(i + (j - (len(methods) - 1) / 2) * width)
            ys.append(e.value)
            a, b = e.ci if e.ci and all(map(math.isfinite, e.ci)) else (e.value, e.value)
            lo.append(e.value - a)
            hi.append(b - e.value)
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=labels[m])
    ax.set_xticks(range(len(names)), [n + (" (unseen)" if n in metrics["preferences"]["unseen"] else "")
                                      for n in names])
    ax.set(ylabel="rule-scored alignment", title="held-out queries: mean and 95% interval over queries")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def weight_sweep(metrics: dict[str, Any]):
    curve = sweep_curve(metrics)
    if not curve:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, pts in curve.items():
        ax.plot([w for w, _ in pts], [v for _, v in pts], marker="o", label=name)
    ax.axvline(metrics["settings"]["w"], color="grey", ls=":", label="w of the claims")
    ax.set(xlabel="PAD weight w (w = 0: the base's greedy replies)", ylabel="mean alignment",
           title="alignment against w (first seed's PRM)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def prm_training(metrics: dict[str, Any]):
    fig, ax = plt.subplots(figsize=(6, 4))
    for t in metrics["training"]:
        if not t["curve"]:
            continue
        ax.plot([p["step"] for p in t["curve"]], [p["loss"] for p in t["curve"]],
                ls="-" if t["kind"] == "real" else "--", marker=".", label=t["label"])
    ax.axhline(math.log(2), color="grey", ls=":", label="log 2 (the policy is its reference)")
    ax.set(xlabel="optimiser step", ylabel="loss per pair (DPO; Bradley-Terry for -rm)",
           title="PRM and ARGS reward-model training (Ray Train + DeepSpeed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def cost(metrics: dict[str, Any]):
    tp = throughput(metrics)
    if not len(tp["pad"]):
        return None
    trained = metrics["preferences"]["trained"]
    points = [("base decoding", np.mean(tp["base"]), mean_over(metrics, "base", trained)),
              ("PAD", np.mean(tp["pad"]), mean_over(metrics, "pad", trained)),
              (f"PAD gated ({100 * np.mean(tp['prm_call_share']):.0f}% PRM calls)", np.mean(tp["gated"]),
               mean_over(metrics, "gated", trained))]
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, speed, sc in points:
        ax.scatter([speed], [float(np.nanmean(sc))], s=60, label=label)
    ax.set(xlabel="tokens / s (one CPU process)", ylabel="mean alignment over the trained preferences",
           title="cost against alignment")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_all(metrics: dict[str, Any], cfg) -> dict[str, Any]:
    figs = {"alignment": alignment(metrics), "weight_sweep": weight_sweep(metrics),
            "prm_training": prm_training(metrics), "cost": cost(metrics)}
    return {name: fig for name, fig in figs.items() if fig is not None}
