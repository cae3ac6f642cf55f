"""policy_decorator claims and report: pure functions of the metrics.

Per task, with the frozen base's success rate b on the held-out evaluation seeds:

* improves: the decorator's final success minus b, at least IMPROVES;
* no_early_collapse: the decorator's lowest success over training minus b, at least -COLLAPSE
  (the bounded, progressive residual never falls clearly below its base);
* unbounded_collapses: the unbounded ablation's (alpha 1, H 0) lowest success minus b, at most
  -COLLAPSE (the paper's contrast: it first drops below the base);
* smoother: the decorator's mean action jerk over RL from scratch's, at most 1.
"""
from __future__ import annotations

from typing import Any

from ...claims import Claim
from ...markdown import table
from .config import Config

IMPROVES = 0.1
COLLAPSE = 0.1


def curve(metrics: dict[str, Any], task: str, variant: str) -> list[dict[str, Any]] | None:
    for t in metrics["trials"]:
        if t["task"] == task and t["variant"] == variant:
            return t["curve"]
    return None


def summary(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name, task in metrics["tasks"].items():
        b = task["base"]
        rows.append({"task": name, "variant": "base", "final": b["success"], "min": b["success"], "best": b["success"],
                     "jerk": b["jerk"], "env_steps": 0})
        for t in (t for t in metrics["trials"] if t["task"] == name):
            s = [p["success"] for p in t["curve"]]
            rows.append({"task": name, "variant": t["variant"], "final": s[-1], "min": min(s), "best": max(s),
                         "jerk": t["curve"][-1]["jerk"], "env_steps": t["curve"][-1]["env_steps"],
                         "alpha": t["alpha"], "H": t["H"]})
    return rows


def claims(metrics: dict[str, Any], cfg: Config) -> list[Claim]:
    out = []
    rows = {(r["task"], r["variant"]): r for r in summary(metrics)}
    for name in metrics["tasks"]:
        base = rows[(name, "base")]
        dec, unb, rl = rows.get((name, "decorator")), rows.get((name, "unbounded")), rows.get((name, "rl_scratch"))
        if dec:
            out.append(Claim.at_least(f"{name}_improves", f"{name}: Policy Decorator improves the frozen base policy",
                                      dec["final"] - base["final"], IMPROVES,
                                      note=f"final success {dec['final']:.2f} vs base {base['final']:.2f} "
                                           f"(alpha {dec['alpha']:g}, H {dec['H']})"))
            out.append(Claim.at_least(f"{name}_no_early_collapse",
                                      f"{name}: with bounded alpha and progressive exploration it never falls "
                                      "clearly below the base during training", dec["min"] - base["final"], -COLLAPSE,
                                      note=f"lowest evaluated success {dec['min']:.2f} vs base {base['final']:.2f}"))
        if unb:
            out.append(Claim.at_most(f"{name}_unbounded_collapses",
                                     f"{name}: the unbounded residual (alpha {unb['alpha']:g}, H {unb['H']}) first drops "
                                     "below the base", unb["min"] - base["final"], -COLLAPSE,
                                     note=f"lowest evaluated success {unb['min']:.2f} vs base {base['final']:.2f}"))
        if dec and rl:
            ratio = dec["jerk"] / rl["jerk"] if rl["jerk"] > 0 else float("nan")
            out.append(Claim.at_most(f"{name}_smoother", f"{name}: the decorated policy acts more smoothly than RL "
                                     "from scratch (mean action jerk ratio)", ratio, 1.0,
                                     note=f"jerk {dec['jerk']:.3f} vs {rl['jerk']:.3f}; RL from scratch final success "
                                          f"{rl['final']:.2f}"))
    return out


def report_md(metrics: dict[str, Any], cfg: Config) -> str:
    lines = ["## Measurements", "",
             "Success rate on held-out evaluation seeds; `min` is the lowest over the evaluations during training.", "",
             table(["task", "variant", "alpha", "H", "env steps", "final success", "min", "best", "action jerk"],
                   [[r["task"], r["variant"], str(r.get("alpha", "-")), str(r.get("H", "-")), str(r["env_steps"]),
                     f"{r['final']:.2f}", f"{r['min']:.2f}", f"{r['best']:.2f}", f"{r['jerk']:.3f}"]
                    for r in summary(metrics)]), ""]
    for name, t in metrics["tasks"].items():
        d = t["demos"]
        expert = d.get("expert_curve")
        source = (f" of an expert trained here ({expert[-1]['env_steps']} env steps of SAC on the dense reward, "
                  f"mean dense return {expert[-1]['return']:.2f} at the end)" if expert else "")
        lines.append(f"- {name}: {d['episodes']} demonstrations{source} ({d['successful']} successful, seeds "
                     f"{d['seeds'][0]}..{d['seeds'][-1]}); base `{t['base']['kind']}` final BC loss "
                     f"{t['base']['loss'][-1][1]:.4f}.")
    return "\n".join(lines)
