"""Figures for sparse_embed: distortion vs dimension per p, exact l_inf vs repetitions, the
average-case transition against m/s^2 and m_99 against s."""
from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .analysis import m99  # noqa: E402
from .config import Config  # noqa: E402

P_COLORS = {"1": "tab:blue", "2": "tab:green", "3": "tab:purple", "8": "tab:orange", "16": "tab:brown", "inf": "tab:red"}


def distortion_vs_dims(metrics: dict[str, Any]):
    rows = metrics["lp"]["rows"]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for method, ls, marker in (("maxpool", "-", "o"), ("linear", "--", "v")):
        for p in dict.fromkeys(r["p"] for r in rows):
            pts: dict[int, float] = {}
            for r in rows:
                if r["method"] == method and r["p"] == p:
                    pts[r["dims"]] = max(pts.get(r["dims"], 0.0), r["distortion"] or 0.0)
            if not pts:
                continue
            x = np.array(sorted(pts))
            y = np.array([pts[k] for k in x])
            y = np.where(y > 0, y, np.nan)  # exact (l_inf): nothing to draw on a log axis
            ax.plot(x, y, ls=ls, marker=marker, color=P_COLORS.get(p, "k"), label=f"{method}, p = {p}")
    eps = sorted({(r["dims"], r["eps"]) for r in rows if r["method"] == "maxpool"})
    ax.plot([e[0] for e in eps], [e[1] for e in eps], "k:", lw=1.5, label="ε (the guarantee)")
    ax.set(xscale="log", yscale="log", xlabel="embedding dimension m·t", ylabel="worst |1 − D_emb / D| over pairs",
           title=f"ℓ_p distortion, |X| = {metrics['data']['n']}, s = {metrics['data']['s']} (max-pooling's ℓ_∞ is exact: not drawn)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    return fig


def linf_exact_vs_reps(metrics: dict[str, Any]):
    linf = metrics["linf"]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    colors = plt.cm.viridis(np.linspace(0, 0.85, len({r["size"] for r in linf})))
    for color, size in zip(colors, sorted({r["size"] for r in linf})):
        rs = [r for r in linf if r["size"] == size]
        frac = np.mean([r["exact_by_t"] for r in rs], axis=0)
        allx = np.mean([np.array(r["exact_by_t"]) == 1.0 for r in rs], axis=0)
        t = np.arange(1, frac.size + 1)
        ax.plot(t, 1 - frac + 1e-6, color=color, marker="o", ms=3, label=f"|X| = {size}: pairs not exact")
        ax.plot(t, 1 - allx + 1e-6, color=color, ls="--", lw=1, label=f"|X| = {size}: runs not all exact")
        ax.axvline(rs[0]["t_pred"], color=color, ls=":", lw=1)
    ax.set(yscale="log", ylim=(5e-7, 1.5), xlabel=f"repetitions t (m = {linf[0]['m']} buckets each)",
           ylabel="share not exact (+1e-6)", title="exact ℓ_∞: dotted lines are the predicted t")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def average_case(metrics: dict[str, Any]):
    bd, cs = metrics["birthday"], metrics["cs"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    s_all = sorted({r["s"] for r in bd} | {r["s"] for r in cs})
    colors = dict(zip(s_all, plt.cm.plasma(np.linspace(0, 0.8, len(s_all)))))
    for s in sorted({r["s"] for r in bd}):
        rs = sorted((r for r in bd if r["s"] == s), key=lambda r: r["m"])
        x = [r["m"] / s**2 for r in rs]
        ax.plot(x, [r["measured"] for r in rs], "o-", color=colors[s], label=f"birthday map, s = {s}")
        ax.plot(x, [r["predicted"] for r in rs], ":", color=colors[s], lw=1)
    for s in sorted({r["s"] for r in cs}):
        rs = sorted((r for r in cs if r["s"] == s), key=lambda r: r["m"])
        ax.plot([r["m"] / s**2 for r in rs], [r["recovered"] for r in rs], "s--", color=colors[s], ms=4,
                label=f"NNLS decoding, s = {s}")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.axhline(0.99, color="gray", lw=0.8, ls="--")
    ax.set(xscale="log", xlabel="m / s²", ylabel="share of vectors exactly preserved",
           title="average case (dotted: Π(1 − i/m))")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    for name, field, rows, marker in (("birthday map", "measured", bd, "o"), ("NNLS (compressed sensing)", "recovered", cs, "s")):
        m = m99(rows, field)
        ss = [s for s in m if np.isfinite(m[s])]
        ax2.plot(ss, [m[s] for s in ss], marker=marker, label=name)
    s_arr = np.array(s_all, dtype=float)
    ax2.plot(s_arr, s_arr**2, "k:", label="s²")
    ax2.set(xscale="log", yscale="log", xlabel="s", ylabel="m for 99% exact", title="dimension needed")
    ax2.set_xticks(s_all, [str(s) for s in s_all])
    ax2.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=8)
    return fig


def plot_all(metrics: dict[str, Any], cfg: Config) -> dict[str, Any]:
    return {"distortion_vs_dims": distortion_vs_dims(metrics), "linf_exact_vs_reps": linf_exact_vs_reps(metrics),
            "average_case": average_case(metrics)}
