"""Figures for policy_decorator: success rate over env steps per variant (the base as a line), each
variant's success minus the base's paired by episode with its 95% interval, action jerk, a frame
strip of the base policy on the first evaluation seed, and the training curve of an expert trained
for demonstrations (where a task has one)."""
from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

from ...results import decode_image  # noqa: E402
from .config import Config  # noqa: E402


def _steps_axis(ax) -> None:
    """At most 6 env-step ticks, in thousands (10k, not 10000: full numbers ran together)."""
    ax.xaxis.set_major_locator(MaxNLocator(6, integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1000:g}k" if x else "0"))


def success_curves(metrics: dict[str, Any]):
    names = list(metrics["tasks"])
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        for t in (t for t in metrics["trials"] if t["task"] == name):
            x = [p["env_steps"] for p in t["curve"]]
            ax.plot(x, [p["success"] for p in t["curve"]], marker="o", ms=3,
                    label=f"{t['variant']} (alpha {t['alpha']:g}, H {t['H']})")
        ax.axhline(metrics["tasks"][name]["base"]["success"], color="k", ls="--", lw=1, label="frozen base")
        ax.set(xlabel="env steps", ylabel="success rate (held-out seeds)", ylim=(-0.03, 1.03),
               title=f"{name} ({metrics['tasks'][name]['base']['kind']} base)")
        _steps_axis(ax)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return fig


def gap_curves(metrics: dict[str, Any]):
    """Each variant's success minus the base's at every evaluation, paired by episode, with the
    95% t interval of that evaluation; the collapse bound as a dotted line."""
    import numpy as np

    from ...claims import paired_difference
    from .analysis import COLLAPSE, IMPROVES

    names = list(metrics["tasks"])
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        base = np.asarray(metrics["tasks"][name]["base"]["successes"], float)
        for t in (t for t in metrics["trials"] if t["task"] == name):
            est = [paired_difference(np.asarray(p["successes"], float), base) for p in t["curve"]]
            x = [p["env_steps"] for p in t["curve"]]
            line, = ax.plot(x, [e.value for e in est], marker="o", ms=3, label=t["variant"])
            ax.fill_between(x, [e.ci[0] for e in est], [e.ci[1] for e in est], color=line.get_color(), alpha=0.15)
        ax.axhline(0, color="k", lw=1)
        ax.axhline(-COLLAPSE, color="k", ls=":", lw=1, label=f"-{COLLAPSE:g} (collapse)")
        ax.axhline(IMPROVES, color="k", ls="--", lw=1, label=f"+{IMPROVES:g} (improves)")
        ax.set(xlabel="env steps", ylabel="success - base (paired episodes)", ylim=(-1.03, 1.03), title=name)
        _steps_axis(ax)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return fig


def jerk_curves(metrics: dict[str, Any]):
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for t in metrics["trials"]:
        ax.plot([p["env_steps"] for p in t["curve"]], [p["jerk"] for p in t["curve"]], label=f"{t['task']} / {t['variant']}")
    for name, task in metrics["tasks"].items():
        ax.axhline(task["base"]["jerk"], ls="--", lw=1, color="k")
    ax.set(xlabel="env steps", ylabel="mean action jerk |a_t - 2a_(t-1) + a_(t-2)|", title="smoothness (dashed: base)")
    _steps_axis(ax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def frame_strip(encoded: list[str], title: str):
    frames = [decode_image(f) for f in encoded]
    fig, axes = plt.subplots(1, len(frames), figsize=(1.3 * len(frames), 1.6), squeeze=False)
    for ax, f in zip(axes[0], frames):
        ax.imshow(f, origin="lower")
        ax.axis("off")
    fig.suptitle(title, fontsize=8)
    return fig


def expert_curves(metrics: dict[str, Any]):
    """Mean dense return over env steps of each task's expert (tasks with demos.source = expert), or
    None when no task has one."""
    curves = {n: t["demos"]["expert_curve"] for n, t in metrics["tasks"].items() if t["demos"].get("expert_curve")}
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for name, curve in curves.items():
        ax.plot([p["env_steps"] for p in curve], [p["return"] for p in curve], marker="o", ms=3, label=name)
    ax.set(xlabel="env steps", ylabel="mean dense return (last 20 episodes)",
           title="experts for the demonstrations: SAC from scratch")
    _steps_axis(ax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def plot_all(metrics: dict[str, Any], cfg: Config) -> dict[str, Any]:
    figs = {"success_curves": success_curves(metrics), "success_gap": gap_curves(metrics),
            "action_jerk": jerk_curves(metrics)}
    expert = expert_curves(metrics)
    if expert is not None:
        figs["expert_training"] = expert
    for name, t in metrics["tasks"].items():
        if t.get("frames"):
            figs[f"frames_{name}"] = frame_strip(t["frames"], f"{name}: frozen base, first evaluation seed")
    return figs
