"""sft_recipe's analysis: the numbers the claims read, the claims and the report tables, as pure
functions of the trials (no Ray, no I/O), so `iclr-ray report` re-renders them from result.json.

Two kinds of unit carry the claims' intervals:

* held-out items, for claims that compare trials' scores: every trial answers the same held-out
  items and keeps, per item, whether it got it right (``*_items``), so a score difference is
  resampled item by item, paired across the trials it compares. The interval covers the choice
  of evaluation items; with one training run per configuration it does not cover the spread
  between training seeds;
* trials, for the rank correlations between a trial's early profile and its final score.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from ...claims import Claim, Estimate, bootstrap, exact
from ...markdown import fmt, table
from . import recipe
from .config import Config


def _of(trials: list[dict], experiment: str) -> list[dict]:
    return [t for t in trials if experiment in t["experiments"] and t["finished"]]


# ----------------------------------------------------------------------------- per-item outcomes


def outcomes(trial: dict[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """(1/0 per held-out item, each item's half: 0 knowledge, 1 skills) behind the trial's score:
    multiple-choice items for knowledge where they were scored, else its exact-match items. None
    when the trial kept no per-item outcomes (unfinished)."""
    know = trial.get("knowledge_mc_items") if trial.get("knowledge_mc") is not None else trial.get("knowledge_em_items")
    skills = trial.get("skills_em_items")
    if not know or not skills:
        return None
    x = np.array([c == "1" for c in know + skills], float)
    return x, np.r_[np.zeros(len(know)), np.ones(len(skills))]


def item_table(trials: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(items x trials outcomes, each item's half): one row per held-out item, which every trial
    answered, so the trials' scores are paired over the rows."""
    pairs = [outcomes(t) for t in trials]
    if not pairs or any(p is None for p in pairs):
        raise ValueError("every trial compared needs its per-item outcomes")
    half = pairs[0][1]
    if any(len(p[1]) != len(half) or (p[1] != half).any() for p in pairs):
        raise ValueError("the trials compared did not answer the same held-out items")
    return np.stack([p[0] for p in pairs], axis=1), half


def scores(x: np.ndarray, half: np.ndarray) -> np.ndarray:
    """Each column's score from its items: recipe.final_score of its knowledge and skills accuracies."""
    know, skills = half == 0, half == 1
    if not know.any() or not skills.any():
        return np.full(x.shape[1], math.nan)
    return recipe.final_score(x[know].mean(axis=0), x[skills].mean(axis=0))


def over_items(trials: Sequence[dict[str, Any]], statistic: Callable[[np.ndarray], float]) -> Estimate:
    """``statistic`` of the trials' scores (in the order given), with its bootstrap interval over the
    held-out items, resampled together for all trials (paired)."""
    x, half = item_table(trials)
    return bootstrap((x, half), lambda xs, hs: float(statistic(scores(xs, hs))))


def _scored(trials: list[dict]) -> list[dict]:
    return [t for t in trials if outcomes(t) is not None]


def resolution(trials: Sequence[dict[str, Any]]) -> float:
    """The smallest score difference the held-out set can show: one item of the larger half
    (scores move in steps of 1 / (2 x items per half)). "Higher" means at least this much."""
    _, half = item_table(trials)
    return 1 / (2 * max(int((half == 0).sum()), int((half == 1).sum())))


# ----------------------------------------------------------------------------- point values


def early_profiles(trials: Sequence[dict[str, Any]], window_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Each trial's (mean early grad norm, mean early loss) over the first ``window_rows`` rows."""
    prof = [recipe.early_profile(t["curve"], window_rows) if t["curve"] else (math.nan, math.nan) for t in trials]
    return np.array([p[0] for p in prof], float), np.array([p[1] for p in prof], float)


def predictive_trials(trials: list[dict]) -> list[dict]:
    """The trials whose early profile is compared with their final score: the grid and warmup ones."""
    return [t for t in trials if {"grid", "warmup"} & set(t["experiments"]) and t["finished"]]


def phased_samples(stacked: dict, phased: dict) -> dict[str, float]:
    """Rows each order trained until its held-out loss first reached 1.05 x the worse of the two
    final held-out losses, and their ratio (stacked / phased)."""
    curve = {k: [(c["samples"], c["eval_loss"]) for c in t["curve"] if "eval_loss" in c]
             for k, t in (("stacked", stacked), ("phased", phased))}
    if not curve["stacked"] or not curve["phased"]:
        return {"target_eval_loss": math.nan, "samples_stacked": math.nan, "samples_phased": math.nan,
                "sample_ratio": math.nan}
    target = 1.05 * max(curve["stacked"][-1][1], curve["phased"][-1][1])
    n_st, n_pa = recipe.samples_to_reach(curve["stacked"], target), recipe.samples_to_reach(curve["phased"], target)
    return {"target_eval_loss": target, "samples_stacked": n_st, "samples_phased": n_pa,
            "sample_ratio": n_st / n_pa if n_pa else math.nan}


def _pick(trials: list[dict], key: tuple) -> int | None:
    for i, t in enumerate(trials):
        if (t["warmup_steps"], t["schedule"]) == key:
            return i
    return None


def warmup_pairs(warm: list[dict]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Index pairs into ``warm``: (most warmup, no/least warmup) at each schedule, and (constant,
    cosine) at each warmup."""
    ws, ss = sorted({t["warmup_steps"] for t in warm}), sorted({t["schedule"] for t in warm})
    warmup = [(_pick(warm, (ws[-1], s)), _pick(warm, (ws[0], s))) for s in ss] if len(ws) >= 2 else []
    schedule = [(_pick(warm, (w, "constant")), _pick(warm, (w, "cosine"))) for w in ws] \
        if {"constant", "cosine"} <= set(ss) else []
    return [p for p in warmup if None not in p], [p for p in schedule if None not in p]


def analyse(cfg: Config, metrics: dict[str, Any]) -> dict[str, Any]:
    """The numbers the report shows, from the trials alone (so reports re-render from result.json)."""
    trials = metrics["trials"]
    out: dict[str, Any] = {}
    g, loss = early_profiles(trials, cfg.early.window_rows)
    for t, gi, li in zip(trials, g, loss):
        t["early_grad_norm"], t["early_loss"] = float(gi), float(li)

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

    predictive = predictive_trials(trials)
    if len(predictive) >= 3:
        score = [t["score"] for t in predictive]
        out["early"] = {"n": len(predictive),
                        "spearman_grad_norm": recipe.spearman([t["early_grad_norm"] for t in predictive], score),
                        "spearman_loss": recipe.spearman([t["early_loss"] for t in predictive], score)}

    warm = _of(trials, "warmup")
    warmup, schedule = warmup_pairs(warm)
    if warmup:
        out["warmup_gap"] = max(abs(warm[a]["score"] - warm[b]["score"]) for a, b in warmup)
    if schedule:
        out["schedule_gap"] = max(abs(warm[a]["score"] - warm[b]["score"]) for a, b in schedule)

    ph = {t["order"]: t for t in _of(trials, "phased")}
    if {"stacked", "phased"} <= set(ph):
        st, pa = ph["stacked"], ph["phased"]
        out["phased"] = {"score_stacked": st["score"], "score_phased": pa["score"], "gap": st["score"] - pa["score"],
                         **phased_samples(st, pa)}

    early_trials = metrics.get("early_stop_trials")
    if early_trials and grid:
        best = out["grid_best"]["label"] if "grid_best" in out else recipe.best_by(grid, "score")["label"]
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


# ----------------------------------------------------------------------------- claims


def claims(metrics: dict[str, Any], cfg: Config) -> list[Claim]:
    """The paper's findings (i)-(iv) and the early-termination rule, each with its interval
    recomputed from the trials in ``metrics``; two properties of the set-up as checks."""
    trials = metrics["trials"]
    tol = cfg.tolerance
    out: list[Claim] = []
    n_items = next((len(o[0]) for o in map(outcomes, trials) if o is not None), 0)
    items = f"95% interval over the {n_items} held-out items, paired"

    grid = _scored(_of(trials, "grid"))
    batches = sorted({t["batch"] for t in grid})
    if len(batches) >= 2:
        small = [i for i, t in enumerate(grid) if t["batch"] == batches[0]]
        large = [i for i, t in enumerate(grid) if t["batch"] == batches[-1]]
        est = over_items(grid, lambda s: s[large].max() - s[small].max())
        lo, hi = (max((grid[i] for i in ix), key=lambda t: t["score"]) for ix in (small, large))
        step = resolution(grid)
        out.append(Claim.at_least(
            "large_batch_wins", "At an equal sample budget, the largest effective batch (at its best lr) scores "
            "higher than the smallest batch (at its best lr): score difference ('improves' read as above 0 by at "
            "least one held-out item)", est, step, source="paper-read",
            note=f"batch {hi['batch']} lr {hi['lr']:g}: {hi['score']:.3f} vs batch {lo['batch']} lr {lo['lr']:g}: "
                 f"{lo['score']:.3f}; higher = above 0 by at least one held-out item (1/{round(1 / step)}); "
                 f"{items}"))

    predictive = predictive_trials(trials)
    if len(predictive) >= 3:
        g, loss = early_profiles(predictive, cfg.early.window_rows)
        score = np.array([t["score"] for t in predictive], float)
        unit = f"95% interval over the {len(predictive)} trials (bootstrap); window {cfg.early.window_rows} rows"
        out.append(Claim.at_most(
            "early_grad_norm_predicts", "Lower early gradient norm predicts a better final score (Spearman < 0; "
            "'predicts' read as the whole interval at most 0)",
            bootstrap((g, score), recipe.spearman), 0.0, note=unit, source="paper-read"))
        out.append(Claim.at_least(
            "early_loss_predicts", "Higher early training loss predicts a better final score (Spearman > 0; "
            "'predicts' read as the whole interval at least 0)",
            bootstrap((loss, score), recipe.spearman), 0.0, note=unit, source="paper-read"))

    warm = _scored(_of(trials, "warmup"))
    warmup, schedule = warmup_pairs(warm)
    if warmup:
        out.append(Claim.at_most(
            "warmup_unneeded", "Warmup makes little difference to the final score (largest |score gap| with and "
            f"without warmup; 'does not compromise performance' read as at most {tol:g})",
            over_items(warm, lambda s: max(abs(s[a] - s[b]) for a, b in warmup)), tol,
            note=f"margin: tolerance {tol:g}; {items}", source="paper-read"))
    if schedule:
        out.append(Claim.at_most(
            "constant_matches_cosine", f"A constant lr matches cosine decay (largest |score gap|; 'matches' read as "
            f"at most {tol:g})",
            over_items(warm, lambda s: max(abs(s[a] - s[b]) for a, b in schedule)), tol,
            note=f"margin: tolerance {tol:g}; {items}", source="paper-read"))

    ph = {t["order"]: t for t in _scored(_of(trials, "phased"))}
    if {"stacked", "phased"} <= set(ph):
        st, pa = ph["stacked"], ph["phased"]
        out.append(Claim.within(
            "stacked_matches_phased", "Stacked training scores about as well as phased training (stacked - phased, "
            f"two-sided; 'no significant difference' read as within ±{tol:g})",
            over_items([st, pa], lambda s: s[0] - s[1]), -tol, tol,
            note=f"{st['score']:.3f} vs {pa['score']:.3f}; margin ±{tol:g}; {items}", source="paper-read"))
        p = phased_samples(st, pa)
        out.append(Claim.at_most(
            "stacked_sample_efficient", "Stacked reaches the common held-out loss with no more rows than phased "
            "(stacked / phased rows)", exact(p["sample_ratio"]), 1.0, check=True,
            note=f"a check: phased sees no skills rows before its second phase, so at an equal budget its held-out "
                 f"loss on the skills half cannot fall before then; target {p['target_eval_loss']:.3f}: stacked "
                 f"{p['samples_stacked']:g} vs phased {p['samples_phased']:g} rows"))

    early_trials = metrics.get("early_stop_trials")
    if early_trials and grid:
        kept = {t["label"] for t in early_trials if t["finished"]}
        cols = [i for i, t in enumerate(grid) if t["label"] in kept]
        stopped = sum(not t["finished"] for t in early_trials)
        saved = (metrics.get("early_stop") or {}).get("compute_saved")
        # a scheduler that stopped nothing kept the best trivially: nothing to judge
        est = over_items(grid, lambda s: s.max() - (s[cols].max() if cols else math.nan)) if stopped \
            else Estimate(math.nan, (-math.inf, math.inf), len(early_trials))
        out.append(Claim.at_most(
            "early_stop_keeps_best", "Stopping trials by their early profile keeps a configuration as good as the "
            "best: best score of the full grid - best score among the trials the scheduler let finish ('as good' "
            f"read as at most {tol:g} below)", est, tol, source="paper-read",
            note=f"{stopped}/{len(early_trials)} trials stopped, {_num(saved):.0%} of the training rows saved "
                 f"({_MODES[metrics.get('early_stop_mode', 'live')]}); margin: tolerance {tol:g}; {items}"))

    finished = [t for t in trials if t["finished"]]
    if finished:
        rows = [t["samples"] for t in finished]
        out.append(Claim.at_most(
            "equal_sample_budget", "Every finished trial trained on the same number of rows (largest - smallest)",
            exact(max(rows) - min(rows)), 0.0, check=True, note=f"{min(rows)} rows; the premise of every comparison"))
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
    lines = ["## Trials", "",
             f"Early grad norm and loss: means over the steps within the first {cfg.early.window_rows} training "
             "rows (the same rows for every batch size).", "",
             table(["trial", "experiments", "batch", "lr", "schedule", "warmup", "order",
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
