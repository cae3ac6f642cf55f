"""Figures for knowledge_entropy: H over pretraining (total, normalised beside the real models, and
per layer), acquisition and retention per start checkpoint and arm, the probes' gain over the
continual runs, and the resuscitation grid's heat map."""
from __future__ import annotations

import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .analysis import arm_table, arms, gains, grid_table  # noqa: E402
from .data import INJECTED  # noqa: E402


def entropy_curve(metrics: dict[str, Any]):
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    for c in metrics["curves"]:
        steps = [p["step"] for p in c["points"]]
        ax.plot(steps, [p["h"] for p in c["points"]], marker="o", label=f"seed {c['seed']}")
        bx.plot(steps, [p["h"] / p["h_max"] for p in c["points"]], marker="o", label=f"seed {c['seed']}")
    for m, color in zip(metrics["models"], ("tab:red", "tab:purple", "tab:brown")):
        bx.axhline(m["h"] / m["h_max"], color=color, ls="--", label=f"{m['name']} (final)")
    ax.set(xlabel="pretraining step", ylabel="knowledge entropy H", title="H over pretraining")
    bx.set(xlabel="pretraining step", ylabel="H / (L log m)", title="normalised, with real final models")
    for a in (ax, bx):
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    return fig


def entropy_layers(metrics: dict[str, Any]):
    c = metrics["curves"][0]
    grid = np.array([p["layers"] for p in c["points"]]).T  # [L, checkpoints]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    im = ax.imshow(grid, aspect="auto", origin="lower", cmap="viridis")
    ax.set_xticks(range(len(c["points"])), [str(p["step"]) for p in c["points"]], rotation=45, fontsize=7)
    ax.set(xlabel="pretraining step", ylabel="layer", title=f"per-layer entropy (seed {c['seed']})")
    fig.colorbar(im, ax=ax, label="entropy of p_l")
    fig.tight_layout()
    return fig


def _half_widths(e) -> tuple[float, float]:
    """(below, above) of an estimate's interval for an error bar; 0 where it has no finite one."""
    if e is None or e.ci is None or not all(map(math.isfinite, e.ci)):
        return 0.0, 0.0
    return e.value - e.ci[0], e.ci[1] - e.value


def acquisition_retention(metrics: dict[str, Any]):
    rows = arm_table(metrics)
    fig, ax = plt.subplots(figsize=(8, 4))
    x = np.arange(len(rows))
    for j, (key, color) in enumerate((("acquired", "tab:blue"), ("retained", "tab:orange"))):
        vals = [r[key].value if r[key] is not None else np.nan for r in rows]
        err = np.array([_half_widths(r[key]) for r in rows]).T
        ax.bar(x + (j - 0.5) * 0.38, vals, 0.38, yerr=err, color=color, capsize=3, label=key)
    ax.set_xticks(x, [r["arm"] for r in rows], rotation=20, fontsize=8)
    ax.axhline(0, color="k", lw=0.8)
    ax.set(ylabel="fact-specific gain (nats/token)", title="acquisition and retention (mean, 95% interval over seeds)")
    ax.legend()
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


def probe_curves(metrics: dict[str, Any]):
    s = metrics["schedule"]
    fig, axes = plt.subplots(1, len(INJECTED), figsize=(11, 4), sharey=True)
    for name, runs in arms(metrics).items():
        if not runs:
            continue
        curves = []
        for r in runs.values():
            e0 = r["eval0"]
            steps = [0] + [p["step"] for p in r["curve"]]
            curves.append({split: [0.0] + [(p["unseen"] - p[split]) - (e0["unseen"] - e0[split]) for p in r["curve"]]
                           for split in INJECTED})
        for ax, split in zip(axes, INJECTED):
            ax.plot(steps, np.mean([c[split] for c in curves], axis=0), marker=".", label=name)
    for ax, split in zip(axes, INJECTED):
        for t in s["inject_at"] if split == "paraphrase" else s["inject_at"][:1]:
            ax.axvline(t + 1, color="k", alpha=0.15)
        ax.set(xlabel="continual step", title=f"{split} facts (grey: injections)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("A(t), nats/token (mean over seeds)")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def resuscitation_heatmap(metrics: dict[str, Any]):
    grid = [g for g in grid_table(metrics) if g["ratio"] > 0]
    if not grid:
        return None
    ps, qs = sorted({g["ratio"] for g in grid}), sorted({g["q"] for g in grid})
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    base = [g for g in grid_table(metrics) if g["ratio"] == 0]
    for ax, key in zip(axes, ("acquired", "retained")):
        m = np.full((len(ps), len(qs)), np.nan)
        for g in grid:
            m[ps.index(g["ratio"]), qs.index(g["q"])] = g[key]
        im = ax.imshow(m, origin="lower", cmap="coolwarm", aspect="auto")
        for i in range(len(ps)):
            for j in range(len(qs)):
                ax.text(j, i, f"{m[i, j]:.3g}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(qs)), [f"{q:g}" for q in qs])
        ax.set_yticks(range(len(ps)), [f"{p:g}" for p in ps])
        note = f" (unmodified: {base[0][key]:.3g})" if base else ""
        ax.set(xlabel="q", ylabel="p", title=f"{key}{note}")
        fig.colorbar(im, ax=ax)
    fig.tight_layout()
    return fig


def entropy_and_acquisition(metrics: dict[str, Any]):
    """Each plain continual run: its start checkpoint's H against what it acquired."""
    runs = [r for r in metrics["runs"] if r["arm"] == "plain"]
    if not runs:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for f, marker in zip(sorted({r["fraction"] for r in runs}), "os^Dv<>"):
        pts = [(r["h_start"], gains(r, metrics["schedule"])["acquired"]) for r in runs if r["fraction"] == f]
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=f"start {f:g} of pretraining")
    ax.set(xlabel="knowledge entropy of the start checkpoint", ylabel="acquired (nats/token)",
           title="entropy and acquisition, every seed")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_all(metrics: dict[str, Any], cfg) -> dict[str, Any]:
    figs = {"entropy_curve": entropy_curve(metrics), "entropy_layers": entropy_layers(metrics),
            "acquisition_retention": acquisition_retention(metrics), "probe_curves": probe_curves(metrics),
            "entropy_vs_acquisition": entropy_and_acquisition(metrics),
            "resuscitation_grid": resuscitation_heatmap(metrics)}
    return {name: fig for name, fig in figs.items() if fig is not None}
