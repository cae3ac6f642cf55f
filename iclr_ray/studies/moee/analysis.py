"""moee's claims and report: pure functions of the metrics.

Every interval is a two-level percentile bootstrap: the models (seeds) are resampled, and within
each task its units (pairs, test items, clustering subsets, queries), the same units for every
model since every model is scored on the same items. A task score is recomputed from the resampled
units (Spearman, best AP, accuracy, mean V-measure, MAP), and a comparison is the mean over the
resampled models of the difference of two views' scores, averaged over the tasks it covers.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ...claims import LEVEL, Claim, Estimate, bootstrap, exact
from ...markdown import fmt, table
from .evaluate import task_score

KIND_NAMES = {"sts": "STS", "classification": "classification", "clustering": "clustering",
              "pair_classification": "pair classification", "reranking": "reranking"}
VIEW_NAMES = {"hs": "HS (z-scored)", "hs_raw": "HS", "rw": "RW", "concat": "MoEE (concat)", "sum": "MoEE (sum)",
              "rw_untrained": "RW, untrained routers", "sum_untrained": "MoEE (sum), untrained routers"}
ANCHOR = ("STS12", "olmoe", 0.6551, 0.01)
"""the paper's reproduction anchor: OLMoE-1B-7B's HS on STS12 (Spearman 0.6551; a user measured
0.6560 in another environment), judged within +-0.01"""


def _units(metrics: dict[str, Any], task: dict[str, Any], view: str) -> np.ndarray:
    """(units, models, ...) of one view on one task, every unit."""
    per_model = [np.asarray(metrics["scores"][task["name"]][m][view], float) for m in metrics["models"]]
    return np.stack(per_model, axis=1)


def test_rows(metrics: dict[str, Any], task: dict[str, Any]) -> np.ndarray:
    """The task's test units (every unit outside its dev split): what claims and tables read."""
    dev = (metrics.get("dev") or {}).get(task["name"], [])
    return np.setdiff1d(np.arange(task["units"]), np.asarray(dev, int))


def _target(task: dict[str, Any], rows: np.ndarray) -> np.ndarray | None:
    return None if task["target"] is None else np.asarray(task["target"], float)[rows]


def difference(metrics: dict[str, Any], tasks: Sequence[dict[str, Any]], a: str, b: str, resamples: int = 1000,
               seed: int = 0) -> Estimate:
    """Mean over ``tasks`` and models of score(view a) - score(view b) (x 100) on the test units,
    with its two-level bootstrap interval; n counts the models times the units of the smallest task."""
    rows = [test_rows(metrics, t) for t in tasks]
    parts = [(t["kind"], _target(t, r), _units(metrics, t, a)[r], _units(metrics, t, b)[r]) for t, r in zip(tasks, rows)]
    n_models = len(metrics["models"])

    def stat(models: np.ndarray, picks: list[np.ndarray]) -> float:
        out = []
        for (kind, target, ua, ub), idx in zip(parts, picks):
            tg = None if target is None else target[idx]
            out.append(np.mean([task_score(kind, ua[idx, m], tg) - task_score(kind, ub[idx, m], tg) for m in models]))
        return 100.0 * float(np.mean(out))

    full = [np.arange(len(p[2])) for p in parts]
    value = stat(np.arange(n_models), full)
    n_units = min(len(p[2]) for p in parts)
    if n_units < 2:
        return Estimate(value, (-math.inf, math.inf), n_models * n_units)
    rng = np.random.default_rng(seed)
    draws = np.array([stat(rng.integers(0, n_models, n_models), [rng.integers(0, len(p[2]), len(p[2])) for p in parts])
                      for _ in range(resamples)])
    ok = draws[np.isfinite(draws)]
    if len(ok) < 0.95 * resamples:
        return Estimate(value, (-math.inf, math.inf), n_models * n_units)
    lo, hi = np.quantile(ok, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return Estimate(value, (float(lo), float(hi)), n_models * n_units)


def score_table(metrics: dict[str, Any]) -> dict[str, dict[str, float]]:
    """{task: {view: mean over models of the task score x 100}} on the test units, and the
    reference model's score."""
    out = {}
    for t in metrics["tasks"]:
        rows = test_rows(metrics, t)
        target = _target(t, rows)
        row = {v: 100.0 * float(np.mean([task_score(t["kind"], np.asarray(metrics["scores"][t["name"]][m][v])[rows],
                                                    target) for m in metrics["models"]]))
               for v in ("hs", "hs_raw", "rw", "concat", "sum", "rw_untrained", "sum_untrained")
               if v in metrics["scores"][t["name"]][metrics["models"][0]]}
        if metrics.get("reference", {}).get(t["name"]) is not None:
            row["reference"] = 100.0 * task_score(t["kind"], np.asarray(metrics["reference"][t["name"]])[rows], target)
        out[t["name"]] = row
    return out


def spearman_sum(metrics: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The paper's STS number for MoEE (sum) in the form its code computes it: Spearman of HS's
    similarities (raw HS, as that code scores HS) plus alpha times Spearman of RW's (x 100, mean
    over the models, test units), beside the Spearman of the similarity sum cos(HS) + alpha cos(RW)
    that the claims use. Per STS task: {"spearman_sum": ..., "similarity_sum": ...}."""
    alpha, out = float(metrics["alpha"]), {}
    for t in metrics["tasks"]:
        if t["kind"] != "sts":
            continue
        rows = test_rows(metrics, t)
        target = _target(t, rows)

        def score(m, v):
            return task_score("sts", np.asarray(metrics["scores"][t["name"]][m][v])[rows], target)

        out[t["name"]] = {
            "spearman_sum": 100.0 * float(np.mean([score(m, "hs_raw") + alpha * score(m, "rw")
                                                   for m in metrics["models"]])),
            "similarity_sum": 100.0 * float(np.mean([score(m, "sum") for m in metrics["models"]]))}
    return out


def _kinds(metrics: dict[str, Any]) -> list[str]:
    return [k for k in KIND_NAMES if any(t["kind"] == k for t in metrics["tasks"])]


def _resamples(cfg) -> int:
    return int(getattr(getattr(cfg, "eval", None), "resamples", 1000))


def claims(metrics: dict[str, Any], cfg=None) -> list[Claim]:
    tasks, n = metrics["tasks"], _resamples(cfg)
    alpha = metrics["alpha"]
    out = []
    how = {"dev": "chosen on the dev units", "fixed": "fixed by the config"}.get(metrics.get("alpha_chosen"),
                                                                                 metrics.get("alpha_chosen", "fixed"))
    for kind in _kinds(metrics):
        of_kind = [t for t in tasks if t["kind"] == kind]
        out.append(Claim.above(
            f"sum_beats_hs_{kind}", f"MoEE (sum) beats HS alone on {KIND_NAMES[kind]}: HS standardised as in the "
                                    "sum, so the difference is what RW adds at the claims' alpha (score x 100, test "
                                    "units; Fig. 1's 'MoEE above HS' read as > 0)",
            difference(metrics, of_kind, "sum", "hs", n), 0.0,
            note=f"alpha {alpha:g} ({how}); {', '.join(t['name'] for t in of_kind)}; paper Fig. 1: MoEE above HS on "
                 "every task type (DeepSeekMoE-16B); the official comparison against raw HS, which also credits "
                 "the standardisation, is reported beside it", source="paper-read"))
    out.append(Claim.above(
        "sum_beats_concat", "MoEE (sum) beats MoEE (concat), averaged over the task types (score x 100; "
                            "'sum above concat' read as > 0)",
        difference(metrics, tasks, "sum", "concat", n), 0.0,
        note="paper Table 2 / Sec. 4: the weighted sum of similarities above concatenation", source="paper-read"))
    out.append(Claim.above(
        "learned_routing", "The trained routers' weights carry more than untrained routers' reading the same "
                           "hidden states: RW alone, trained minus untrained, averaged over the task types "
                           "(score x 100)",
        difference(metrics, tasks, "rw", "rw_untrained", n), 0.0,
        note="negative control: freshly initialised router weights read the same hidden states; RW alone, so "
             "the comparison does not vanish when alpha is 0", source="ours"))
    gap = max(float(np.max(np.abs(_units(metrics, t, "sum_alpha0") - _units(metrics, t, "hs")))) for t in tasks)
    out.append(Claim.at_most("alpha0_is_hs", "MoEE (sum) at alpha = 0 scores exactly as HS (largest unit difference)",
                             exact(gap), 1e-12, check=True))
    anchor = _anchor(metrics, n)
    if anchor is not None:
        out.append(anchor)
    return out


def _anchor(metrics: dict[str, Any], resamples: int) -> Claim | None:
    name, model_key, value, tol = ANCHOR
    task = next((t for t in metrics["tasks"] if t["name"] == name), None)
    model = next((m for m in metrics["models"] if model_key in m.lower()), None)
    if task is None or model is None:
        return None
    est = bootstrap((np.asarray(metrics["scores"][name][model]["hs_raw"]), np.asarray(task["target"])),
                    lambda s, g: task_score("sts", s, g), resamples=resamples)
    return Claim.within("olmoe_sts12_hs", f"{model}'s raw HS on STS12 (every pair) reproduces the paper's Spearman {value} (quoted "
                        f"in the official repo's issue #1, its place in the paper unverified; the +-{tol:g} window "
                        "ours)", est,
                        value - tol, value + tol, note="paper Table 2; a user measured 0.6560 (official repo issue #1)",
                        source="ours")


def report_md(metrics: dict[str, Any], cfg=None) -> str:
    table_ = score_table(metrics)
    ref = any("reference" in r for r in table_.values())
    views = [v for v in ("hs_raw", "hs", "rw", "rw_untrained", "concat", "sum", "sum_untrained")
             if v in next(iter(table_.values()))]
    rows = [[t["name"], KIND_NAMES[t["kind"]], f"{len(test_rows(metrics, t))}/{t['units']}"] + [fmt(table_[t["name"]][v], ".1f") for v in views]
            + ([fmt(table_[t["name"]].get("reference", float("nan")), ".1f")] if ref else [])
            for t in metrics["tasks"]]
    d = metrics["dims"]
    lines = [f"Models: {', '.join(metrics['models'])} ({metrics['source']} tasks, prompt `{metrics['prompt']}`; "
             f"HS {d['hs']} dims, RW {d['rw']} dims: {', '.join(sorted(set(d['rw_kind'].values())))}); "
             f"alpha = {metrics['alpha']:g} ({metrics.get('alpha_chosen', 'fixed')}). Scores x 100 on the test units "
             "(units: test / all; the rest are the dev split alpha is chosen on and the z-scoring statistics are read "
             f"from: {metrics.get('standardised_on', 'each task')}), the mean over the models: Spearman (STS), accuracy "
             "(classification), V-measure (clustering), best average precision (pair classification), MAP (reranking). "
             "HS is raw, as the paper's code scores it; HS (z-scored) is the half MoEE uses and the claims' baseline.",
             "", table(["task", "type", "units", *[VIEW_NAMES[v] for v in views]]
                       + (["all-MiniLM-L6-v2"] if ref else []), rows), ""]
    if all("hs_raw" in metrics["scores"][t["name"]][metrics["models"][0]] for t in metrics["tasks"]):
        n = _resamples(cfg)
        rows = []
        for kind in _kinds(metrics):
            of_kind = [t for t in metrics["tasks"] if t["kind"] == kind]
            parts = [difference(metrics, of_kind, a, b, n) for a, b in (("sum", "hs_raw"), ("hs", "hs_raw"),
                                                                          ("sum", "hs"))]
            rows.append([KIND_NAMES[kind], *[f"{fmt(e.value, '+.1f')} [{fmt(e.ci[0], '+.1f')}, "
                                             f"{fmt(e.ci[1], '+.1f')}]" for e in parts]])
        lines += ["The official comparison, against raw HS (the paper's code standardises RW and MoEE, not HS), "
                  "split into what the standardisation of HS adds and what RW adds (x 100, test units, 95% "
                  "intervals; the claims read the last column):", "",
                  table(["type", "MoEE (sum) - HS (raw)", "HS (z-scored) - HS (raw)", "MoEE (sum) - HS (z-scored)"],
                        rows), ""]
    notes = [f"- {t['name']}: {t['note']}" for t in metrics["tasks"] if t.get("note")]
    if notes:
        lines += ["Tasks:", "", *notes, ""]
    sts = spearman_sum(metrics) if all("hs_raw" in metrics["scores"][t["name"]][metrics["models"][0]]
                                       for t in metrics["tasks"]) else {}
    if sts:
        lines += ["STS, MoEE (sum) two ways (x 100): the paper's code adds the two Spearman scores, Spearman(HS) + "
                  "alpha Spearman(RW); the claims use the Spearman of the summed similarity, cos(HS) + alpha cos(RW).",
                  "", table(["task", "Spearman(HS) + alpha Spearman(RW)", "Spearman(cos HS + alpha cos RW)"],
                            [[k, fmt(v["spearman_sum"], ".1f"), fmt(v["similarity_sum"], ".1f")] for k, v in sts.items()]),
                  ""]
    sw = metrics["sweep"]
    dev = sw.get("per_task_dev") or {}
    lines += ["Alpha sweep (MoEE (sum), mean over the models, x 100; test units, and in brackets the dev units alpha "
              "is chosen on):", "",
              table(["task", *[f"alpha {a:g}" for a in sw["alphas"]]],
                    [[name, *[fmt(100 * float(np.mean(v)), ".1f")
                              + (f" ({fmt(100 * float(np.mean(dev[name][i])), '.1f')})" if name in dev else "")
                              for i, v in enumerate(per)]] for name, per in sw["per_task"].items()]),
              ""]
    p = metrics.get("pretrain") or {}
    if p:
        finals = {m: c[-1]["loss"] for m, c in p["curves"].items() if c}
        lines += [f"Pre-training: {p['docs']} reviews, {p['tokens']} tokens in {p['rows']} rows, vocabulary {p['vocab']}; "
                  "final loss " + ", ".join(f"{m} {fmt(v, '.3f')}" for m, v in finals.items()) + "."]
    return "\n".join(lines)
