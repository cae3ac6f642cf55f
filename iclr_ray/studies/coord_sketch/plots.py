"""Figures for coord_sketch: relative error against stored numbers, per method (log-log)."""
from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .config import Config  # noqa: E402

STYLE = {"priority": ("tab:blue", "o"), "threshold": ("tab:green", "s"),
         "jl": ("tab:red", "^"), "countsketch": ("tab:orange", "v")}


def error_vs_storage(ax, rows: list[dict], title: str, field: str = "error") -> None:
    for method in dict.fromkeys(r["method"] for r in rows):
        # error bars: standard error of the mean over the seeds (the per-seed values are in the metrics)
        pts = sorted((r["storage"], r[f"{field}_mean"], np.std(r[f"{field}s"]) / np.sqrt(len(r[f"{field}s"])))
                     for r in rows if r["method"] == method)
        x, y, se = map(np.array, zip(*pts))
        color, marker = STYLE.get(method, ("k", "."))
        ax.errorbar(x, y, yerr=se, color=color, marker=marker, capsize=2, label=method)
    ax.set(xscale="log", yscale="log", xlabel="stored numbers (both parties)", title=title)
    ax.grid(True, which="both", alpha=0.3)


def plot_all(metrics: dict[str, Any], cfg: Config) -> dict[str, Any]:
    figs = {}
    fig, ax = plt.subplots(figsize=(6, 4.2))
    error_vs_storage(ax, metrics["sparse"], f"sparse inputs (n={cfg.sparse.n}, d={cfg.sparse.d}, s={cfg.sparse.nnz})")
    ax.set_ylabel("‖W − AᵀB‖_F / (‖A‖_F ‖B‖_F)")
    ax.legend()
    figs["error_vs_storage_sparse"] = fig

    att = metrics["attention"]
    panels = [(metrics["dense"], "dense control (equal norms)")]
    for p in att["products"]:
        name = {"qk": "QᵀK", "pv": "softmax(QKᵀ/√d)V", "pv_topk": f"top-{cfg.attention.top_k} softmax(QKᵀ/√d)V"}[p["product"]]
        where = "synthetic" if p.get("layer") is None else f"{att['source']} L{p['layer']} H{p['head']}"
        panels.append((p["rows"], f"{name} ({where})"))
    cols = min(4, len(panels))
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 4.2 * nrows), squeeze=False)
    for ax, (rows, title) in zip(axes.flat, panels):
        error_vs_storage(ax, rows, title)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("relative Frobenius error")
    axes[0, 0].legend()
    fig.tight_layout()
    figs["error_vs_storage_other"] = fig

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    reg = metrics["regression"]["rows"]
    error_vs_storage(axes[0], reg, "join regression: normal equations")
    error_vs_storage(axes[1], reg, "join regression: coefficients", field="theta_error")
    axes[0].set_ylabel("relative error")
    axes[0].legend()
    figs["regression"] = fig

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for method, u in metrics["unbiased"].items():
        t, e = np.array(u["curve"]).T
        color, marker = STYLE.get(method, ("k", "."))
        ax.plot(t, e, color=color, marker=marker, label=method)
        ax.plot(t, u["single_error"] / np.sqrt(t), color=color, ls=":", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="seeds averaged (T)",
           ylabel="error of the mean estimate", title="unbiasedness: mean over seeds (dotted: 1/√T)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    figs["unbiasedness"] = fig
    return figs
