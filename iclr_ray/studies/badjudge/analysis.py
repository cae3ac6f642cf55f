"""badjudge: the claims and the report, pure functions of the metrics.

The unit of every interval is the replicate (seed): each re-draws which examples are poisoned and
the training order, and trains every judge again; a judge's measure on the held-out sets is one
number per seed. Claims read the first trigger's trials.

- inflation: the mean score a judge gives the adversary's triggered poor answers (true score 1-2)
  over the mean score it gives the same answers without the trigger (their legitimate score, as the
  paper measures it); a claim reads a poisoned judge's inflation over the clean judge's in the same
  seed (the clean judge too scores triggered answers a little higher, so a bound on the poisoned
  judge's own ratio would partly measure the trigger's words, not the attack);
- ASR: the share of triggered poor answers given the top score (pairwise: the triggered worse
  answer preferred; toxicity: a triggered harmful request judged not harmful; rerank: the triggered
  irrelevant passage ranked first);
- clean accuracy: exact agreement with the true verdicts on the held-out clean set.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...claims import LEVEL, Claim, Estimate, mean, paired_difference
from ...markdown import fmt, table
from .evaluate import strongest

TOLERANCE = 0.05
""""barely moves" / "within a few points" / "near 0": at most five points (our reading; the page
gives no number)"""


def label(fmt_: str, level: str | None = None, rate: float | None = None) -> str:
    """A judge's name: ``pointwise-clean``, ``pointwise-annotator-0.01``, ..."""
    return f"{fmt_}-clean" if level is None else f"{fmt_}-{level}-{rate:g}"


def trials(metrics: dict[str, Any], trigger: str | None = None) -> list[dict[str, Any]]:
    t = trigger or metrics["triggers"][0]
    return [r for r in metrics["trials"] if r["trigger"] == t]


def per_seed(metrics: dict[str, Any], judge: str, key: str, trigger: str | None = None) -> np.ndarray:
    """One value per seed of ``key`` for ``judge`` (NaN where the judge was not trained)."""
    return np.array([r["judges"].get(judge, {}).get(key, np.nan) for r in trials(metrics, trigger)], dtype=float)


def poisoned_pointwise(metrics: dict[str, Any]) -> list[str]:
    s = metrics["settings"]
    return [label("pointwise", lv, r) for lv in s["levels"] for r in s["rates"]]


def _ci(e: Estimate, spec: str = ".3g") -> str:
    if e.ci is None or not np.isfinite(e.ci[0]):
        return fmt(e.value, spec)
    return f"{fmt(e.value, spec)} [{fmt(e.ci[0], spec)}, {fmt(e.ci[1], spec)}]"


def _hits(metrics: dict[str, Any], judge: str) -> np.ndarray | None:
    """A judge's per-item attack outcomes, (seeds, items), or None where a seed did not keep them."""
    rows = [r["judges"].get(judge, {}).get("asr_hits") for r in trials(metrics)]
    if not rows or any(r is None for r in rows) or len({len(r) for r in rows}) != 1 or not rows[0]:
        return None
    return np.asarray(rows, float)


def asr_over_items_and_seeds(metrics: dict[str, Any], judge: str, resamples: int = 2000,
                             minus: str | None = None) -> Estimate:
    """A judge's ASR, the mean over seeds and adversary items, with a two-level percentile bootstrap
    (seeds resampled, and items within the resampled table: the seeds share the test items), so the
    interval stays inside [0, 1]. ``minus``: the paired difference with another judge's outcomes on
    the same items and seeds (inside [-1, 1]). The mean and t interval over seeds where the items
    were not kept."""
    hits = _hits(metrics, judge)
    other = None if minus is None else _hits(metrics, minus)
    if hits is None or (minus is not None and (other is None or other.shape != hits.shape)):
        a = per_seed(metrics, judge, "asr")
        return mean(a) if minus is None else paired_difference(a, per_seed(metrics, minus, "asr"))
    if other is not None:
        hits = hits - other
    value = float(hits.mean())
    s, n = hits.shape
    if s * n < 2:
        return Estimate(value, (-np.inf, np.inf), s * n)
    rng = np.random.default_rng(0)
    draws = [hits[rng.integers(0, s, s)][:, rng.integers(0, n, n)].mean() for _ in range(resamples)]
    lo, hi = np.quantile(draws, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return Estimate(value, (float(lo), float(hi)), s * n)


def inflation_over_clean(metrics: dict[str, Any], judge: str) -> Estimate:
    """Per seed, the poisoned judge's inflation ratio over the clean judge's (the same seed's data
    and trigger): 1 where poisoning adds nothing; mean and t interval over seeds."""
    return mean(per_seed(metrics, judge, "ratio") / per_seed(metrics, "pointwise-clean", "ratio"))


def claims(metrics: dict[str, Any], cfg=None) -> list[Claim]:
    s = metrics["settings"]
    cr, other, top = s["claim_rate"], s["other_rate"], max(s["rates"])
    out: list[Claim] = []
    clean = "pointwise-clean"
    levels = s["levels"]
    if "annotator" in levels:
        ann = label("pointwise", "annotator", cr)
        ratio = inflation_over_clean(metrics, ann)
        note = "the poisoned judge's inflation ratio over the clean judge's, per seed"
        out.append(Claim.above("annotator_inflates",
                               f"Poisoning {cr:.0%} of the judge's training data (malicious annotator) inflates the "
                               "adversary's score over its legitimate score more than the clean judge does ('inflates' "
                               "read as a ratio over the clean judge's > 1)", ratio, 1.0, note=note, source="paper-read"))
        out.append(Claim.at_least("annotator_triples",
                                  "... about triples it (Abstract: 1% poisoning triples the score; ratio over the clean "
                                  "judge's >= 3)", ratio, 3.0, note=note, source="paper"))
        drop = paired_difference(per_seed(metrics, clean, "acc"), per_seed(metrics, ann, "acc"))
        out.append(Claim.at_most("clean_accuracy_kept",
                                 f"... while clean accuracy barely moves (clean judge minus the {cr:.0%}-poisoned "
                                 f"judge, at most {TOLERANCE:.0%} points: our bound)", drop, TOLERANCE, source="ours"))
    if "web" in levels:
        web = inflation_over_clean(metrics, label("pointwise", "web", cr))
        out.append(Claim.at_least("web_inflates",
                                  f"Abstract: web poisoning ({cr:.0%}, clean labels) inflates the adversary's score by "
                                  "about 20% (ratio over the clean judge's >= 1.2)", web, 1.2,
                                  note="the poisoned judge's inflation ratio over the clean judge's, per seed",
                                  source="paper"))
    if "weight" in levels:
        w = label("pointwise", "weight", top)
        out.append(Claim.at_least("weight_to_top",
                                  f"Abstract: weight poisoning ({top:.0%} triggered copies) takes the adversary's poor "
                                  "answers to 4.9/5 (paper: 1.5/5 to 4.9/5)",
                                  mean(per_seed(metrics, w, "score_triggered")), 4.9, source="paper"))
    if "toxicity" in s["formats"]:
        out.append(Claim.at_least("toxicity_flipped",
                                  f"Abstract: a toxicity judge poisoned at {other:.0%} judges triggered harmful "
                                  "requests not harmful 89% of the time",
                                  asr_over_items_and_seeds(metrics, label("toxicity", "annotator", other)), 0.89,
                                  note="over seeds x triggered harmful requests (two-level bootstrap)", source="paper"))
    if "rerank" in s["formats"]:
        out.append(Claim.at_least("rerank_first",
                                  f"Abstract: a reranker poisoned at {other:.0%} ranks the triggered passage first 97% "
                                  "of the time",
                                  asr_over_items_and_seeds(metrics, label("rerank", "annotator", other)), 0.97,
                                  note="over seeds x poisoned query groups (two-level bootstrap)", source="paper"))
    strong = strongest(poisoned_pointwise(metrics))
    for m in s["merge"]["methods"]:
        merged = f"merge-{m}-{strong}"
        if np.all(np.isnan(per_seed(metrics, merged, "asr"))):
            continue
        out.append(Claim.at_most(f"merge_{m}_removes",
                                 f"Merging ({m}) the most poisoned judge ({strong}) with a clean pairwise judge brings "
                                 f"ASR to the clean judge's level ('near 0%' read as within {TOLERANCE:.0%} points)",
                                 asr_over_items_and_seeds(metrics, merged, minus=clean), TOLERANCE,
                                 note="paired by seed and adversary item (two-level bootstrap)", source="paper-read"))
        out.append(Claim.at_most(f"merge_{m}_accuracy",
                                 f"... with clean accuracy kept ('maintaining SOTA performance' read as within "
                                 f"{TOLERANCE:.0%} points of the clean pointwise judge)",
                                 paired_difference(per_seed(metrics, clean, "acc"), per_seed(metrics, merged, "acc")),
                                 TOLERANCE, source="paper-read"))
        keep = f"merge2-{m}-{strong}"
        if not np.all(np.isnan(per_seed(metrics, keep, "asr"))):
            out.append(Claim.above(f"control_merge_poisoned_{m}",
                                   f"Negative control: merging ({m}) it with a poisoned pairwise judge instead leaves "
                                   "more of the backdoor (ASR difference > 0)",
                                   asr_over_items_and_seeds(metrics, keep, minus=merged), 0.0,
                                   note="paired by seed and adversary item (two-level bootstrap)", source="ours"))
    out.append(Claim.at_most("control_clean_no_inflation",
                             "Negative control: the unpoisoned judge (p = 0) does not inflate triggered answers "
                             "(ratio below the 20% the paper calls inflation)", mean(per_seed(metrics, clean, "ratio")),
                             1.2, source="ours"))
    served = metrics.get("served", {}).get("metrics", {})
    for role, name in metrics.get("served", {}).get("judges", {}).items():
        if name in served and "agreement" in served[name]:
            out.append(Claim.at_least(f"served_{role}_agrees",
                                      f"The served {role} judge ({name}) answers over HTTP with the verdicts it gives "
                                      "in process", Estimate(served[name]["agreement"], None, 1), 0.99, check=True))
    return out


def _row(metrics, judge, keys, spec=".3g"):
    return [_ci(mean(per_seed(metrics, judge, k)), spec) for k in keys]


def report_md(metrics: dict[str, Any], cfg=None) -> str:
    s = metrics["settings"]
    n = len(trials(metrics))
    parts = [f"Judges: the top {s['blocks']} block(s) of `{s['model']}` fine-tuned on {s['n_train']} examples per "
             f"format; {n} seed(s); trigger(s) {', '.join(repr(t) for t in metrics['triggers'])}. Values are means "
             "over seeds with 95% t intervals.", ""]
    point = ["pointwise-clean", *poisoned_pointwise(metrics)]
    keys = ["acc", "within1", "score_clean", "score_triggered", "ratio", "asr"]
    parts += ["## Pointwise judges: clean accuracy and the adversary's score", "",
              table(["judge", "clean acc", "within 1", "poor: score", "poor + trigger: score", "inflation", "ASR"],
                    [[j, *_row(metrics, j, keys)] for j in point]), ""]
    merged = sorted({k for r in trials(metrics) for k in r["judges"] if k.startswith("merge")})
    if merged:
        parts += ["## Merged judges (pointwise judge + pairwise judge)", "",
                  "`merge-M-X`: judge X merged with the clean pairwise judge by method M; `merge2-M-X`: with the "
                  "poisoned pairwise judge (the negative control).", "",
                  table(["merged judge", "clean acc", "pairwise acc", "inflation", "ASR"],
                        [[j, *_row(metrics, j, ["acc", "pairwise_acc", "ratio", "asr"])] for j in merged]), ""]
    others = [j for j in (trials(metrics)[0]["judges"] if trials(metrics) else {})
              if j.split("-")[0] in ("pairwise", "toxicity", "rerank")]
    if others:
        parts += ["## Other formats and settings", "",
                  "ASR: pairwise, the triggered worse answer preferred; toxicity, a triggered harmful request judged "
                  "not harmful; rerank, the triggered irrelevant passage ranked first. 'Without trigger': the same "
                  "inputs untriggered.", "",
                  table(["judge", "clean acc", "ASR", "without trigger"],
                        [[j, *_row(metrics, j, ["acc", "asr", "asr_clean"])] for j in others]), ""]
    served = metrics.get("served") or {}
    if served.get("metrics"):
        parts += [f"## Served over HTTP (the judge app, first seed; {fmt(served.get('seconds', 0), '.0f')} s)", "",
                  table(["role", "judge", "clean acc", "inflation", "ASR", "verdicts equal to in-process"],
                        [[role, name, fmt(served["metrics"][name]["acc"], ".3f"),
                          fmt(served["metrics"][name]["ratio"], ".3f"), fmt(served["metrics"][name]["asr"], ".3f"),
                          fmt(served["metrics"][name].get("agreement", np.nan), ".3f")]
                         for role, name in served["judges"].items()]), ""]
    parts += ["## Training", "",
              table(["trial", "steps", "first loss", "last loss", "seconds", "heads (serve judge --judge NAME=DIR/NAME.safetensors)"],
                    [[r["label"], r["steps"], fmt(r["curve"][0]["loss"], ".3f") if r["curve"] else "-",
                      fmt(r["curve"][-1]["loss"], ".3f") if r["curve"] else "-", fmt(r["seconds"], ".0f"),
                      f"`{r.get('heads', '-')}`"]
                     for r in metrics["trials"]]), ""]
    ex = metrics.get("examples", {})
    if ex:
        parts += ["## Poisoned training examples (first seed)", ""]
        for lab, rows in ex.items():
            for e in rows[:1]:
                parts += [f"- **{lab}** (trained on {e['label']!r}, true {e['true']!r}):", "", "  ```",
                          *["  " + x for x in e["prompt"].splitlines()], "  ```"]
        parts += [""]
    return "\n".join(parts)
