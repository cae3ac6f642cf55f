"""igcg: the claims and the report, pure functions of the metrics.

The unit of every interval is the (target, seed) pair: each is an optimisation of its own, and the
methods compared on it share its target and its seed. A run's *steps to success* is the first step
whose suffix meets the criterion and (with ``verify``, on in every preset) passes the text check;
a run that never does within the budget counts the whole budget (and its CPU seconds, its whole
run's). Time is the optimising process's CPU time (``time.process_time``), not the wall time of
tasks that share the machine's cores. That censoring can only pull a ratio between two methods
towards 1, so it never makes a speed-up claim hold that would not hold without it.

A speed-up is the ratio of the mean steps (or seconds) to success of the baseline over the method's,
across the units both ran on, with a percentile-bootstrap interval over those units.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...claims import Claim, Estimate, bootstrap, paired_difference, proportion
from ...markdown import fmt, table

PAPER_SPEEDUP = 10.0
""""about 10x fewer iterations than GCG" (I-GCG, K = 7): an OpenReview reviewer's summary, not a number
read in the paper, so the bound is ours (source "ours")"""
NEAR_ALL = 0.95
"""the paper's "nearly 100%" attack success rate, read as at least 95% of runs succeeding"""


def steps_to_success(run: dict[str, Any], budget: int) -> int:
    return run["success_step"] if run["success_step"] is not None else budget


def seconds_to_success(run: dict[str, Any]) -> float:
    """CPU seconds of the optimising process to its success (wall seconds for a run recorded before
    CPU time was)."""
    t = run.get("cpu_seconds") or run["seconds"]
    s = run["success_step"]
    return t[s] if s is not None else t[-1]


def select(metrics: dict[str, Any], method: str, K: int, init: str = "default") -> dict[tuple[int, int], dict]:
    """{(target, seed): run} of one method."""
    return {(r["target"], r["seed"]): r for r in metrics["runs"]
            if r["method"] == method and r["K"] == K and r["init"] == init}


def _method(K: int) -> str:
    return "gcg" if K == 1 else "igcg"


def paired(metrics: dict[str, Any], base: dict, other: dict, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(baseline, method) per unit both ran on: steps or seconds to success."""
    units = sorted(set(base) & set(other))
    f = (lambda r: steps_to_success(r, metrics["budget"])) if what == "steps" else seconds_to_success
    return np.array([f(base[u]) for u in units], float), np.array([f(other[u]) for u in units], float)


def speedup(base: np.ndarray, other: np.ndarray) -> Estimate:
    """mean(base) / mean(other), bootstrapped over the units."""
    return bootstrap((base, other), lambda a, b: a.mean() / b.mean() if b.mean() > 0 else np.inf)


def success(runs: dict) -> Estimate:
    n = len(runs)
    return proportion(sum(r["success_step"] is not None for r in runs.values()), n)


def claims(metrics: dict[str, Any], cfg=None) -> list[Claim]:
    out: list[Claim] = []
    gcg = select(metrics, "gcg", 1)
    K = metrics["K"]
    for k in [k for k in metrics["compared_ks"] if k > 1]:
        mc = select(metrics, "igcg", k)
        for what, word in (("steps", "fewer steps"), ("seconds", "less CPU time")):
            a, b = paired(metrics, gcg, mc, what)
            out.append(Claim.above(f"{'fewer_steps' if what == 'steps' else 'less_time'}_K{k}",
                                   f"I-GCG's multi-coordinate update (K={k}) reaches success in {word} than GCG (K=1) "
                                   "(speed-up > 1: our bound)",
                                   speedup(a, b), 1.0,
                                   note=f"mean {what} to success, GCG / K={k}; over (target, seed)", source="ours"))
    if K in metrics["compared_ks"] and K > 1:
        a, b = paired(metrics, gcg, select(metrics, "igcg", K), "steps")
        out.append(Claim.at_least(f"tenfold_K{K}", f"I-GCG (K={K}) needs about 10x fewer iterations than GCG "
                                  "(10x: a reviewer's summary, not read in the paper)",
                                  speedup(a, b), PAPER_SPEEDUP, note="the same ratio as fewer_steps; bound 10x",
                                  source="ours"))
        out.append(Claim.at_least(f"success_rate_K{K}", f"I-GCG (K={K}) succeeds on nearly every target "
                                  f"('nearly 100%' ASR read as >= {NEAR_ALL:.0%})",
                                  success(select(metrics, _method(K), K)), NEAR_ALL,
                                  note=f"share of runs succeeding within {metrics['budget']} steps (Wilson)",
                                  source="paper-read"))
    easy = select(metrics, _method(K), K, "easy")
    if easy:
        a, b = paired(metrics, select(metrics, _method(K), K), easy, "steps")
        # a difference, not a ratio: a start that already succeeds takes 0 steps
        out.append(Claim.above("easy_to_hard", "Easy-to-hard initialisation cuts the steps a new target needs "
                               "(steps saved > 0: our bound)",
                               paired_difference(a, b), 0.0, source="ours",
                               note=f"mean steps saved, from '{_init(metrics)}' minus from the easy target's suffix "
                                    f"(K={K}); the other targets"))
    rnd = select(metrics, "random", K)
    if rnd:
        a, b = paired(metrics, rnd, select(metrics, _method(K), K), "steps")
        out.append(Claim.above("gradient_guided", f"Gradient-guided candidates beat random ones at the same budget "
                               f"(K={K})", speedup(a, b), 1.0,
                               note="mean steps to success, random-candidate control / I-GCG", source="ours"))
    return out


def _init(metrics: dict[str, Any]) -> str:
    runs = [r for r in metrics["runs"] if r["init"] == "default"]
    return runs[0]["init_suffix"][:12] + "..." if runs else "the default"


def method_names(metrics: dict[str, Any]) -> list[tuple[str, str, int, str]]:
    """(display name, method, K, init) of every method the run has, in a fixed order."""
    out = [("GCG (K=1)" if k == 1 else f"I-GCG K={k}", _method(k), k, "default") for k in metrics["ks"]]
    K = metrics["K"]
    if select(metrics, "random", K):
        out.append((f"random K={K} (control)", "random", K, "default"))
    if select(metrics, _method(K), K, "easy"):
        out.append((f"I-GCG K={K}, easy-to-hard", _method(K), K, "easy"))
    return out


def summary_rows(metrics: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, method, K, init in method_names(metrics):
        runs = select(metrics, method, K, init)
        steps = [steps_to_success(r, metrics["budget"]) for r in runs.values()]
        secs = [seconds_to_success(r) for r in runs.values()]
        per_step = [(r.get("cpu_seconds") or r["seconds"])[-1] / max(1, len(r["seconds"]) - 1) for r in runs.values()]
        failed = sum(int(r.get("failed_checks") or 0) for r in runs.values())
        ok = [r for r in runs.values() if r["success_step"] is not None]
        changed = [np.mean(r["changed"][1:]) for r in runs.values() if len(r["changed"]) > 1]
        verified = [r.get("generates") for r in ok if r.get("generates") is not None]
        rows.append([name, f"{len(ok)}/{len(runs)}", fmt(np.median(steps), ".3g"), fmt(np.mean(steps), ".3g"),
                     fmt(np.mean(secs), ".3g"), fmt(np.mean(per_step), ".2g"),
                     fmt(np.mean(changed), ".2g") if changed else "-", str(failed),
                     f"{sum(verified)}/{len(verified)}" if verified else "-"])
    return rows


def report_md(metrics: dict[str, Any], cfg=None) -> str:
    t = metrics["targets"]
    lines = [f"Model: {metrics['model']}. {len(t)} targets, budget {metrics['budget']} steps, success = "
             f"{'the target is the greedy generation' if metrics['criterion'] == 'exact' else 'loss below the threshold'}"
             f"; easy-to-hard source: target {metrics['easy']}.", "",
             "A success is a step whose suffix makes the target the greedy answer on its token ids and, pasted as "
             "text into the whole prompt, makes greedy `generate()` in float32 answer with the target (the text "
             "check); a run goes on optimising past a step that meets the first and fails the second (*failed text "
             "checks*). Steps and CPU seconds to success count a run that never succeeds at its whole budget. "
             "*Verified*: of the successful runs, those whose final suffix passes the text check.", "",
             table(["method", "succeeded", "median steps", "mean steps", "mean CPU s", "CPU s / step",
                    "tokens changed / step", "failed text checks", "verified"], summary_rows(metrics)), "",
             "Targets:", "",
             table(["#", "request", "target"], [[str(i), x["message"], x["target"]] for i, x in enumerate(t)]), "",
             "The suffixes and every run's per-step log: `artefacts/suffixes.jsonl`, `artefacts/steps.jsonl`."]
    return "\n".join(lines)
