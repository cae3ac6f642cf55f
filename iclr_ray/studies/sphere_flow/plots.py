"""Figures for sphere_flow: predicted k*(β) with the measured modes, mode amplitudes against
time with the predicted slopes, particle snapshots on the circle and the sphere, cluster counts
over time, the PDE's density (Fig. 4), and the k*-cluster state's time against the number of tokens."""
from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from . import growth  # noqa: E402
from .config import Config  # noqa: E402


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


def _amp_panel(ax, panel: dict[str, Any], title: str):
    t, amps, k_star = np.asarray(panel["t"]), np.asarray(panel["amps"]), panel["k_star"]
    rel = np.exp(growth.log_rates(panel["beta"], panel["d"], panel["modes"], panel["form"])
                 - growth.log_rates(panel["beta"], panel["d"], [k_star], panel["form"])[0])
    colors = dict(zip(range(-2, 3), ("tab:purple", "tab:blue", "black", "tab:orange", "tab:red")))
    for j, k in enumerate(panel["modes"]):
        color = colors[k - k_star]
        ax.plot(t, amps[:, j], color=color, lw=2.2 if k == k_star else 1.0,
                label=f"ℓ = {k}{' (k*)' if k == k_star else ''}")
        if abs(k - k_star) <= 1:
            ax.plot(t, amps[0, j] * np.exp(rel[j] * t), "--", color=color, lw=1)
    ax.set(yscale="log", xlabel="t (units of 1/λ_k*)", ylabel="mode amplitude", title=title)
    ax.set_ylim(max(1e-4, panel["amps_min"]), 1.5)
    ax.grid(True, which="both", alpha=0.3)


def amplitudes(panels: list[dict[str, Any]]):
    """Seed 0 of up to three circle β (the clearly separated ones first), one sphere β, one PDE."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.3 * len(panels), 4), squeeze=False)
    for ax, p in zip(axes[0], panels):
        what = {"circle": "particles, d = 2", "sphere": f"particles, d = {p['d']}",
                "pde": "PDE, d = 2"}[p["experiment"]]
        _amp_panel(ax, p, f"{what}, β = {p['beta']:g} ({p['form'].upper()})")
    axes[0, 0].legend(fontsize=7, ncol=2)
    fig.suptitle("Mode amplitudes a_ℓ(t); dashed: a_ℓ(0) e^{λ_ℓ t} for k* and its neighbours")
    fig.tight_layout()
    return fig


def snapshots_circle(runs: list[dict[str, Any]]):
    """Angle histograms drawn as log10(1 + density / uniform) on one radial scale: the uniform
    start is a ring at 0.3, a cluster a spike whose height grows with its mass."""
    cols = max(len(r["snapshots"]) for r in runs)
    fig, axes = plt.subplots(len(runs), cols, figsize=(2.1 * cols, 2.3 * len(runs)),
                             subplot_kw={"projection": "polar"}, squeeze=False)
    for row, run in zip(axes, runs):
        for ax, snap in zip(row, run["snapshots"]):
            density = np.asarray(snap["density"])
            bins = len(density)
            edges = np.linspace(-np.pi, np.pi, bins + 1)
            r = np.log10(1 + np.repeat(density, 2))  # a step outline, closed around the circle
            th = np.repeat(edges, 2)[1:-1]
            ax.fill(np.append(th, th[0]), np.append(r, r[0]), color="tab:blue", alpha=0.8)
            ax.set_ylim(0, np.log10(1 + bins))
            ax.set_title(f"β={run['beta']:g}, t={snap['t']:.3g}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
        for ax in row[len(run["snapshots"]):]:
            ax.axis("off")
    fig.suptitle("Tokens on the circle, seed 0: log10(1 + density/uniform) by angle "
                 "(uniform -> k*-periodic -> clusters -> merges)")
    fig.tight_layout()
    return fig


def snapshots_sphere(runs: list[dict[str, Any]]):
    fig, axes = plt.subplots(len(runs), 2, figsize=(9, 2.6 * len(runs)), subplot_kw={"projection": "mollweide"},
                             squeeze=False)
    for row, run in zip(axes, runs):
        for ax, snap in zip(row, run["snapshots"]):
            ax.scatter(snap["lon"], snap["lat"], s=2, alpha=0.5)
            ax.set_title(f"d = {run['d']}, β = {run['beta']:g} (k* = {run['k_star']}), t = {snap['t']:.3g}",
                         fontsize=8)
            ax.set_xticklabels([])
            ax.grid(True, alpha=0.3)
    fig.suptitle("Tokens on the sphere (direction of the first 3 coordinates), start and end of the run")
    fig.tight_layout()
    return fig


def cluster_counts(runs: list[dict[str, Any]]):
    betas = list(dict.fromkeys(r["beta"] for r in runs))
    cmap = plt.get_cmap("plasma")
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for r in runs:
        i = betas.index(r["beta"])
        color = cmap(i / max(len(betas), 1))
        offset = 0.05 * (i - (len(betas) - 1) / 2)  # so that equal counts of different β do not overlap
        first = r["seed"] == 0 and r["form"] == runs[0]["form"]
        ax.step(r["t"], np.asarray(r["count"]) + offset, where="post", color=color, alpha=0.8, lw=1.2,
                label=f"β = {r['beta']:g} (k* = {r['k_star']})" if first else None)
    ax.set(xscale="log", xlabel="t (units of 1/λ_k*)", ylabel="clusters (β offset slightly)",
           title="Cluster count over time (every seed)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def pde_density(run: dict[str, Any]):
    fig, ax = plt.subplots(figsize=(7, 4.2))
    theta = (np.arange(run["bins"]) + 0.5) * 2 * np.pi / run["bins"]
    snaps = run["densities"]
    cmap = plt.get_cmap("viridis")
    for i, s in enumerate(snaps):
        ax.plot(theta, s["rho"], color=cmap(i / max(len(snaps) - 1, 1)), lw=1, label=f"t = {s['t']:.2g}")
    ax.set(yscale="log", xlabel="θ", ylabel="2π ρ(θ) (mean over arcs of 2π/%d)" % run["bins"],
           title=f"Mean-field PDE, β = {run['beta']:g} ({run['form'].upper()}), uniform + white noise, "
                 f"Lax–Friedrichs on {run['grid']} cells (seed 0)")
    ax.set_ylim(bottom=1e-2)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    return fig


def metastable_vs_n(rows: list[dict[str, Any]]):
    """Each start's k*-state time against n (open: still k* clusters at the horizon), the median per n."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    rows = [r for r in rows if r["meta_time"] is not None and np.isfinite(r["meta_time"])]  # null once read back
    done = [r for r in rows if not r["censored"]]
    cens = [r for r in rows if r["censored"]]
    ax.scatter([r["n"] for r in done], [r["meta_time"] for r in done], s=14, alpha=0.6, label="one start")
    if cens:
        ax.scatter([r["n"] for r in cens], [r["meta_time"] for r in cens], s=14, facecolors="none",
                   edgecolors="tab:blue", label="no merge by the horizon (lower bound)")
    ns = sorted({r["n"] for r in rows})
    med = [np.median([r["meta_time"] for r in rows if r["n"] == n]) for n in ns]
    ax.plot(ns, med, "o-", color="black", label="median")
    r0 = rows[0]
    ax.set(xscale="log", xlabel="tokens n",
           ylabel="t (units of 1/λ_k*)",
           title=f"β = {r0['beta']:g}: end of the linear phase to fewer than k* = {r0['k_star']} clusters")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def plot_all(metrics: dict[str, Any], cfg: Config) -> dict[str, Any]:
    f = metrics["figures"]
    figs = {"k_star_vs_beta": k_star_vs_beta(metrics)}
    if f["amplitudes"]:
        figs["mode_amplitudes"] = amplitudes(f["amplitudes"])
    if f["circle_snapshots"]:
        figs["snapshots_circle"] = snapshots_circle(f["circle_snapshots"])
        figs["cluster_counts"] = cluster_counts(f["cluster_counts"])
    if f["sphere_snapshots"]:
        figs["snapshots_sphere"] = snapshots_sphere(f["sphere_snapshots"])
    if f["pde_density"]:
        figs["pde_density"] = pde_density(f["pde_density"])
    if any(r["meta_time"] is not None and np.isfinite(r["meta_time"]) for r in metrics["metastable_n"]):
        figs["metastable_vs_n"] = metastable_vs_n(metrics["metastable_n"])
    return figs
