"""sft_recipe's analysis: the numbers the claims read, the claims and the report tables, as pure
functions of the trials (no Ray, no I/O), so `iclr-ray report` re-renders them from result.json."""
from __future__ import annotations

import math
from typing import Any

from ...claims import Claim
from ...markdown import fmt, table
from . import recipe
from .config import Config


def _of(trials: list[dict], experiment: str) -> list[dict]:
    return [t for t in trials if experiment in t["experiments"] and t["finished"]]


def analyse(cfg: Config, metrics: dict[str, Any]) -> dict[str, Any]:
    """The numbers the claims read, from the trials alone (so reports re-render from result.json)."""
    trials = metrics["trials"]
    out: dict[str, Any] = {}
    for t in trials:
        t["early_grad_norm"], t["early_loss"] = recipe.early_profile(t["curve"], cfg.early.window) \
            if t["curve"] else (math.nan, math.nan)

    grid = _of(trials, "grid")
    batches = sorted({t["batch"] for t in grid})
    if len(batches) >= 2:
        def best_at(b):
            return recipe.best_by([t for t in grid if t["batch"] == b], "score")
        lo, hi = best_at(batches[0]), best_at(batches[-1])
        out["batch"] = {"smallest": batches[0], "largest": batches[-1], "best_lr_smallest": lo["lr"],
                        "best_lr_largest": hi["lr"], "score_smallest": lo["score"], "score_largest": hi["score"],
                        "gap": hi["score"] - lo["score"]}
        best = recipe.best_by(grid, "score")
        out["grid_best"] = {"label": best["label"], "batch": best["batch"], "lr": best["lr"], "score": best["score"]}

    predictive = [t for t in trials if {"grid", "warmup"} & set(t["experiments"]) and t["finished"]]
    if len(predictive) >= 3:
        score = [t["score"] for t in predictive]
        out["early"] = {"n": len(predictive),
                        "spearman_grad_norm": recipe.spearman([t["early_grad_norm"] for t in predictive], score),
                        "spearman_loss": recipe.spearman([t["early_loss"] for t in predictive], score)}

    warm = _of(trials, "warmup")
    ws, ss = sorted({t["warmup_steps"] for t in warm}), sorted({t["schedule"] for t in warm})
    pick = {(t["warmup_steps"], t["schedule"]): t["score"] for t in warm}
    if len(ws) >= 2:
        out["warmup_gap"] = max(abs(pick[(ws[-1], s)] - pick[(ws[0], s)]) for s in ss
                                if (ws[-1], s) in pick and (ws[0], s) in pick)
    if "constant" in ss and "cosine" in ss:
        out["schedule_gap"] = max(abs(pick[(w, "constant")] - pick[(w, "cosine")]) for w in ws
                                  if (w, "constant") in pick and (w, "cosine") in pick)

    ph = {t["order"]: t for t in _of(trials, "phased")}
    if {"stacked", "phased"} <= set(ph):
        st, pa = ph["stacked"], ph["phased"]
        curve = {k: [(c["samples"], c["eval_loss"]) for c in ph[k]["curve"] if "eval_loss" in c] for k in ph}
        target = 1.05 * max(curve["stacked"][-1][1], curve["phased"][-1][1])
        n_st, n_pa = recipe.samples_to_reach(curve["stacked"], target), recipe.samples_to_reach(curve["phased"], target)
        out["phased"] = {"score_stacked": st["score"], "score_phased": pa["score"], "gap": st["score"] - pa["score"],
                         "target_eval_loss": target, "samples_stacked": n_st, "samples_phased": n_pa,
                         "sample_ratio": n_st / n_pa if n_pa else math.nan}

    early_trials = metrics.get("early_stop_trials")
    if early_trials and grid:
        best = out["grid_best"]["label"]
        survivor = {t["label"]: t for t in early_trials}.get(best)
        full = sum(t["samples"] for t in grid)
        spent = sum(t["samples"] for t in early_trials)
        out["early_stop"] = {"mode": metrics.get("early_stop_mode", "live"),
                             "best_label": best, "best_survived": bool(survivor and survivor["finished"]),
                             "stopped": sum(not t["finished"] for t in early_trials), "trials": len(early_trials),
                             "samples_full": full, "samples_with_scheduler": spent,
                             "compute_saved": 1 - spent / full if full else math.nan,
                             "best_under_scheduler": (recipe.best_by([t for t in early_trials if t["finished"]],
                                                                     "score") or {}).get("label")}
    return out


_MODES = {"replay": "the grid's recorded curves replayed to the scheduler in a Tune run",
          "live": "the grid trained again under the scheduler"}


def _num(x: Any) -> float:
    """A measured value, NaN where result.json holds null (not measurable in this run)."""
    return math.nan if x is None else float(x)


def claims(metrics: dict[str, Any], cfg: Config) -> list[Claim]:
    out: list[Claim] = []
    tol = cfg.tolerance
    if b := metrics.get("batch"):
        out.append(Claim.at_least(
            "large_batch_wins", "At an equal sample budget, the largest effective batch (at its best lr) scores at "
            "least as well as the smallest batch (at its best lr)", _num(b["gap"]), 0.0,
            note=f"batch {b['largest']} lr {b['best_lr_largest']:g}: {b['score_largest']:.3f} vs batch "
                 f"{b['smallest']} lr {b['best_lr_smallest']:g}: {b['score_smallest']:.3f}"))
    if e := metrics.get("early"):
        out.append(Claim.at_most(
            "early_grad_norm_predicts", "Lower early gradient norm predicts a better final score (Spearman < 0)",
            _num(e["spearman_grad_norm"]), 0.0, note=f"{e['n']} trials, window {cfg.early.window:.0%} of the budget"))
        out.append(Claim.at_least(
            "early_loss_predicts", "Higher early training loss predicts a better final score (Spearman > 0)",
            _num(e["spearman_loss"]), 0.0, note=f"{e['n']} trials"))
    if "warmup_gap" in metrics:
        out.append(Claim.at_most("warmup_unneeded", "Warmup makes little difference to the final score (|gap|)",
                                 _num(metrics["warmup_gap"]), tol))
    if "schedule_gap" in metrics:
        out.append(Claim.at_most("constant_matches_cosine", "A constant lr matches cosine decay (|score gap|)",
                                 _num(metrics["schedule_gap"]), tol))
    if p := metrics.get("phased"):
        out.append(Claim.at_least("stacked_matches_phased", "Stacked training scores about as well as phased "
                                  "(stacked - phased)", _num(p["gap"]), -tol,
                                  note=f"{p['score_stacked']:.3f} vs {p['score_phased']:.3f}"))
        out.append(Claim.at_most("stacked_sample_efficient", "Stacked training reaches the common held-out loss "
                                 "with fewer samples (stacked / phased samples)", _num(p["sample_ratio"]), 1.0,
                                 note=f"target held-out loss {p['target_eval_loss']:.3f}: stacked "
                                      f"{p['samples_stacked']} vs phased {p['samples_phased']} rows"))
    if s := metrics.get("early_stop"):
        out.append(Claim.at_least(
            "early_stop_keeps_best", "Stopping trials by their early profile keeps the best configuration",
            float(s["best_survived"]), 1.0,
            note=f"{s['stopped']}/{s['trials']} trials stopped, {_num(s['compute_saved']):.0%} of the "
                 f"training rows saved ({_MODES[s.get('mode', 'live')]})"))
    return out


def report_md(metrics: dict[str, Any], cfg: Config) -> str:
    def f(x):
        return fmt(x, ".3f")

    rows = []
    for t in metrics.get("trials", []):
        know = t.get("knowledge_mc") if t.get("knowledge_mc") is not None else t.get("knowledge_em")
        rows.append([t["label"], ", ".join(t["experiments"]), str(t["batch"]), f"{t['lr']:g}", t["schedule"],
                     str(t["warmup_steps"]), t["order"], f(t.get("early_grad_norm")), f(t.get("early_loss")), f(know),
                     f(t.get("skills_em")), f(t.get("score"))])
    lines = ["## Trials", "", table(["trial", "experiments", "batch", "lr", "schedule", "warmup", "order",
                                     "early grad norm", "early loss", "knowledge", "skills EM", "score"], rows)]
    if s := metrics.get("early_stop"):
        lines += ["", "## Early termination vs the full grid", "",
                  f"{s['stopped']} of {s['trials']} trials stopped; {s['samples_with_scheduler']} of "
                  f"{s['samples_full']} training rows spent ({_num(s['compute_saved']):.0%} saved). "
                  "Best of the full grid: "
                  f"`{s['best_label']}` ({'survived' if s['best_survived'] else 'stopped'}); best under the "
                  f"scheduler: `{s['best_under_scheduler']}`. The rerun: {_MODES[s.get('mode', 'live')]}."]
    if d := metrics.get("data"):
        lines += ["", "## Data", "", ", ".join(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}"
                                               for k, v in d.items())]
    lines += ["", "Every trial's curves in TensorBoard: `tensorboard --logdir <run>/tune`."]
    return "\n".join(lines)

