"""Figures for sphere_flow: predicted k*(β) with the measured modes, mode amplitudes against
time with the predicted slopes, particle snapshots on the circle and the sphere, cluster counts
over time, and the PDE's density (Fig. 4)."""
from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from . import growth  # noqa: E402


def k_star_vs_beta(metrics: dict[str, Any]):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    tables = [("circle_table", 2, "tab:blue"), ("sphere_table", None, "tab:orange")]
    top = max([t["beta"] for name, _, _ in tables for t in metrics[name]] + [10.0])
    grid = np.geomspace(0.5, 1.3 * top, 400)
    for name, d, color in tables:
        table = metrics[name]
        if not table:
            continue
        d = d or table[0]["d"]
        ax.step(grid, [growth.k_star(b, d) for b in grid], where="mid", color=color, alpha=0.7,
                label=f"predicted k*, d = {d}")
        for t in table:
            for mode, count in t["dominant"].items():
                ax.scatter(t["beta"] * (1.03 if d > 2 else 0.97), int(mode), s=25 + 12 * count,
                           facecolors=color if t["included"] else "none", edgecolors=color, zorder=3)
    ax.scatter([], [], s=40, c="gray", label="measured dominant mode (size: cells)")
    ax.scatter([], [], s=40, facecolors="none", edgecolors="gray", label="β excluded (λ_k*/λ_2nd small)")
    ax.set(xscale="log", xlabel="β", ylabel="mode / degree",
           title="Most unstable mode k*(β) and the dominant mode seen")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _amp_panel(ax, t, amps, k_star, rates_rel, title):
    t, amps = np.asarray(t), np.asarray(amps)
    modes = [k for k in range(k_star - 2, k_star + 3) if 1 <= k <= amps.shape[1]]
    colors = dict(zip(range(-2, 3), ("tab:purple", "tab:blue", "black", "tab:orange", "tab:red")))
    for k in modes:
        color = colors[k - k_star]
        ax.plot(t, amps[:, k - 1], color=color, lw=2.2 if k == k_star else 1.0,
                label=f"ℓ = {k}{' (k*)' if k == k_star else ''}")
        if abs(k - k_star) <= 1:
            ax.plot(t, amps[0, k - 1] * np.exp(rates_rel[k - 1] * t), "--", color=color, lw=1)
    ax.set(yscale="log", xlabel="t (units of 1/λ_k*)", ylabel="mode amplitude", title=title)
    ax.set_ylim(max(1e-4, amps.min()), 1.5)
    ax.grid(True, which="both", alpha=0.3)


def _spread(items: list, k: int) -> list:
    if len(items) <= k:
        return items
    return [items[i] for i in np.unique(np.linspace(0, len(items) - 1, k).round().astype(int))]


def amplitudes(cells, outs, separation: float):
    """Seed 0 of up to three circle β (the clearly separated ones first), one sphere β, one PDE."""
    def first(kind):
        runs = [(c, o) for c, o in zip(cells, outs) if c["experiment"] == kind and c["seed"] == 0]
        form = runs[0][0]["form"] if runs else None
        runs = [(c, o) for c, o in runs if c["form"] == form]
        clear = [(c, o) for c, o in runs if growth.separation(c["beta"], c["d"]) >= separation]
        return clear or runs

    panels = _spread(first("circle"), 3) + first("sphere")[:1] + first("pde")[:1]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.3 * len(panels), 4), squeeze=False)
    for ax, (c, o) in zip(axes[0], panels):
        L = np.asarray(o["amps"]).shape[1]
        rel = np.exp(growth.log_rates(c["beta"], c["d"], np.arange(1, L + 1), c["form"])
                     - growth.log_rates(c["beta"], c["d"], [o["k_star"]], c["form"])[0])
        what = {"circle": "particles, d = 2", "sphere": f"particles, d = {c['d']}",
                "pde": "PDE, d = 2"}[c["experiment"]]
        _amp_panel(ax, o["t"], o["amps"], o["k_star"], rel, f"{what}, β = {c['beta']:g} ({c['form'].upper()})")
    axes[0, 0].legend(fontsize=7, ncol=2)
    fig.suptitle("Mode amplitudes a_ℓ(t); dashed: a_ℓ(0) e^{λ_ℓ t} for k* and its neighbours")
    fig.tight_layout()
    return fig


def snapshots_circle(cells, outs):
    """Angle histograms drawn as log10(1 + density / uniform) on one radial scale: the uniform
    start is a ring at 0.3, a cluster a spike whose height grows with its mass."""
    runs = [(c, o) for c, o in zip(cells, outs) if c["experiment"] == "metastable" and o["snapshots"]][:4]
    cols = max(len(o["snapshots"]) for _, o in runs)
    fig, axes = plt.subplots(len(runs), cols, figsize=(2.1 * cols, 2.3 * len(runs)),
                             subplot_kw={"projection": "polar"}, squeeze=False)
    bins = 180
    edges = np.linspace(-np.pi, np.pi, bins + 1)
    for row, (c, o) in zip(axes, runs):
        for ax, snap in zip(row, o["snapshots"]):
            x = np.asarray(snap["x"], float)
            h, _ = np.histogram(np.arctan2(x[:, 1], x[:, 0]), bins=edges)
            r = np.log10(1 + np.repeat(h * bins / len(x), 2))  # a step outline, closed around the circle
            th = np.repeat(edges, 2)[1:-1]
            ax.fill(np.append(th, th[0]), np.append(r, r[0]), color="tab:blue", alpha=0.8)
            ax.set_ylim(0, np.log10(1 + bins))
            ax.set_title(f"β={c['beta']:g}, t={snap['t']:.3g}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
        for ax in row[len(o["snapshots"]):]:
            ax.axis("off")
    fig.suptitle("Tokens on the circle, seed 0: log10(1 + density/uniform) by angle "
                 "(uniform -> k*-periodic -> clusters -> merges)")
    fig.tight_layout()
    return fig


def snapshots_sphere(cells, outs):
    runs = [(c, o) for c, o in zip(cells, outs) if c["experiment"] == "sphere" and o["snapshots"]][:4]
    fig, axes = plt.subplots(len(runs), 2, figsize=(9, 2.6 * len(runs)), subplot_kw={"projection": "mollweide"},
                             squeeze=False)
    for row, (c, o) in zip(axes, runs):
        for ax, snap in zip(row, [o["snapshots"][0], o["snapshots"][-1]]):
            x = np.asarray(snap["x"], float)[:, :3]
            x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)  # d > 3: direction in 3D
            lon, lat = np.arctan2(x[:, 1], x[:, 0]), np.arcsin(np.clip(x[:, 2], -1, 1))
            ax.scatter(lon, lat, s=2, alpha=0.5)
            ax.set_title(f"d = {c['d']}, β = {c['beta']:g} (k* = {o['k_star']}), t = {snap['t']:.3g}", fontsize=8)
            ax.set_xticklabels([])
            ax.grid(True, alpha=0.3)
    fig.suptitle("Tokens on the sphere (direction of the first 3 coordinates), start and end of the run")
    fig.tight_layout()
    return fig


def cluster_counts(cells, outs):
    runs = [(c, o) for c, o in zip(cells, outs) if c["experiment"] == "metastable"]
    betas = list(dict.fromkeys(c["beta"] for c, _ in runs))
    cmap = plt.get_cmap("plasma")
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for c, o in runs:
        t, n = np.asarray(o["t"]), np.asarray(o["count"])
        on = n > 0
        i = betas.index(c["beta"])
        color = cmap(i / max(len(betas), 1))
        offset = 0.05 * (i - (len(betas) - 1) / 2)  # so that equal counts of different β do not overlap
        first = c["seed"] == 0 and c["form"] == runs[0][0]["form"]
        ax.step(t[on], n[on] + offset, where="post", color=color, alpha=0.8, lw=1.2,
                label=f"β = {c['beta']:g} (k* = {o['k_star']})" if first else None)
    ax.set(xscale="log", xlabel="t (units of 1/λ_k*)", ylabel="clusters (β offset slightly)",
           title="Cluster count over time (every seed)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def pde_density(cells, outs):
    runs = [(c, o) for c, o in zip(cells, outs) if c["experiment"] == "pde" and o["densities"]]
    c, o = runs[0]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    theta = np.linspace(0, 2 * np.pi, c["n"], endpoint=False)
    snaps = o["densities"]
    cmap = plt.get_cmap("viridis")
    for i, s in enumerate(snaps):
        ax.plot(theta, s["rho"], color=cmap(i / max(len(snaps) - 1, 1)), lw=1, label=f"t = {s['t']:.2g}")
    ax.set(xlabel="θ", ylabel="2π ρ(θ)", title=f"Mean-field PDE, β = {c['beta']:g}, uniform + white noise "
                                               f"(seed 0; resolved until t = {o['t_resolved']:.3g})")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, alpha=0.3)
    return fig


def plot_all(metrics: dict[str, Any], cells: list[dict[str, Any]], outs: list[dict[str, Any]]) -> dict[str, Any]:
    kinds = {c["experiment"] for c in cells}
    figs = {"k_star_vs_beta": k_star_vs_beta(metrics)}
    if kinds & {"circle", "sphere", "pde"}:
        figs["mode_amplitudes"] = amplitudes(cells, outs, metrics["separation_rule"])
    if any(c["experiment"] == "metastable" and o["snapshots"] for c, o in zip(cells, outs)):
        figs["snapshots_circle"] = snapshots_circle(cells, outs)
        figs["cluster_counts"] = cluster_counts(cells, outs)
    if any(c["experiment"] == "sphere" and o["snapshots"] for c, o in zip(cells, outs)):
        figs["snapshots_sphere"] = snapshots_sphere(cells, outs)
    if any(c["experiment"] == "pde" and o["densities"] for c, o in zip(cells, outs)):
        figs["pde_density"] = pde_density(cells, outs)
    return figs
