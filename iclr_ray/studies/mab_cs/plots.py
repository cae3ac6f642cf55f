"""Figures for mab_cs: regret against t (log x) per policy, final regret against T (PE's cost and
quality regret beside its bound), alpha and ell, and PE's pulls against the gap."""
from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402
import numpy as np  # noqa: E402

from .analysis import KINDS, bounds  # noqa: E402
from .config import Config  # noqa: E402

STYLE = {"pe": ("tab:blue", "o"), "pe_asym": ("tab:cyan", "D"), "pe_cs": ("tab:purple", "o"),
         "cs_ucb": ("tab:red", "^"), "cs_ts": ("tab:green", "s"), "cs_etc": ("tab:orange", "v")}
LABEL = {"pe": "PE", "pe_asym": "asymmetric PE", "pe_cs": "PE-CS", "cs_ucb": "CS-UCB", "cs_ts": "CS-TS",
         "cs_etc": "CS-ETC"}


def _line(ax, x, y, policy, **kw) -> None:
    color, marker = STYLE.get(policy, ("k", "."))
    ax.plot(x, y, color=color, marker=marker, markersize=3, label=LABEL.get(policy, policy), **kw)


def curves(rows: list[dict[str, Any]]):
    cases = list(dict.fromkeys((r["instance"], r["alpha"]) for r in rows))
    fig, axes = plt.subplots(2, len(cases), figsize=(4.2 * len(cases), 7), squeeze=False)
    for j, (inst, alpha) in enumerate(cases):
        for r in (r for r in rows if (r["instance"], r["alpha"]) == (inst, alpha)):
            _line(axes[0, j], r["times"], r["cost_curve"], r["policy"])
            _line(axes[1, j], r["times"], r["quality_curve"], r["policy"])
        axes[0, j].set_title(f"{inst}, alpha = {alpha:g}")
        for i, what in enumerate(("cost regret", "quality regret")):
            axes[i, j].set(xscale="log", xlabel="t", ylabel=what)
            axes[i, j].grid(True, which="both", alpha=0.3)
    axes[0, 0].legend()
    fig.tight_layout()
    return fig


def horizons(metrics: dict[str, Any]):
    """Final regret against T: cost + quality for PE and PE-CS with a + b ln T fits, and PE's cost and
    quality regret apart, each beside its instance-dependent bound."""
    fits = metrics["horizon_fits"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    ax = axes[0]
    for f in fits:
        T, y = np.array(f["T"]), np.array(f["total"])
        _line(ax, T, y, f["policy"])
        b, a = np.polyfit(np.log(T), y, 1)
        ax.plot(T, a + b * np.log(T), ls="--", color=STYLE[f["policy"]][0], alpha=0.6,
                label=f"{LABEL[f['policy']]}: a + b ln T")
    ax.set(xscale="log", xlabel="horizon T", ylabel="final cost + quality regret (mean)",
           title="regret against the horizon")
    ax.legend()
    pe = sorted((r for r in metrics["horizons"] if r["policy"] == "pe"), key=lambda r: r["T"])
    bs = bounds(pe, metrics["instances"]) if pe else []
    for ax, kind in zip(axes[1:], KINDS):
        if pe:
            T = [r["T"] for r in pe]
            ax.plot(T, [r[kind] for r in pe], "o-", color=STYLE["pe"][0], label=f"PE {kind} regret (mean)")
            ax.plot(T, [max(r[f"runs_{kind}"]) for r in pe], "^:", color=STYLE["pe"][0], alpha=0.6, label="worst run")
            ax.plot(T, [b[kind] for b in bs], "k--", label="instance-dependent bound")
        ax.set(xscale="log", yscale="log", xlabel="horizon T", ylabel=f"final {kind} regret",
               title=f"PE: {kind} regret against its bound")
        ax.legend(fontsize=8)
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


def gaps(fit: dict[str, Any]):
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    ax.plot(fit["gap"], fit["pulls"], "o-", color="tab:blue", label=f"PE (slope {fit['slope']:.2f})")
    ax.plot(fit["gap"], fit["n_of_gap"], "k--", alpha=0.6, label="2 ln(T gap²)/gap²")
    ax.set(xscale="log", yscale="log", xlabel="gap to the threshold", ylabel="pulls of the cheaper arm",
           title="PE: pulls of a suboptimal cheaper arm")
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return fig


def sweep(rows: list[dict[str, Any]], key: str, xlabel: str):
    insts = list(dict.fromkeys(r["instance"] for r in rows))
    fig, axes = plt.subplots(1, len(insts), figsize=(5.5 * len(insts), 4.2), squeeze=False)
    for ax, inst in zip(axes[0], insts):
        for p in dict.fromkeys(r["policy"] for r in rows):
            pts = sorted((r[key], r["total"], r["total_se"]) for r in rows if r["instance"] == inst and r["policy"] == p)
            x, y, se = map(np.array, zip(*pts))
            color, marker = STYLE.get(p, ("k", "."))
            ax.errorbar(x, y, yerr=se, color=color, marker=marker, capsize=2, label=LABEL.get(p, p))
        ax.set(yscale="log", xlabel=xlabel, ylabel="final cost + quality regret", title=inst)
        ax.grid(True, which="both", alpha=0.3)
    axes[0, 0].legend()
    fig.tight_layout()
    return fig


def plot_all(metrics: dict[str, Any], cfg: Config) -> dict[str, Any]:
    figs = {}
    if metrics.get("curves"):
        figs["regret_vs_t"] = curves(metrics["curves"])
    if metrics.get("horizon_fits"):
        figs["regret_vs_horizon"] = horizons(metrics)
    if metrics.get("gap_fit"):
        figs["pulls_vs_gap"] = gaps(metrics["gap_fit"])
    if metrics.get("alpha_sweep"):
        figs["regret_vs_alpha"] = sweep(metrics["alpha_sweep"], "alpha", "subsidy factor alpha")
    if metrics.get("ell_sweep"):
        figs["regret_vs_ell"] = sweep(metrics["ell_sweep"], "ell", "reference arm ell")
    return figs
