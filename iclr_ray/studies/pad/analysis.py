"""pad: the rule-scored alignment of every decoder's replies, the claims and the report. Pure
functions of the metrics (the replies are in them; the rules are data.py's).

A method's alignment to preference P on a held-out query is P's rule score of its reply (a
combination: the mean of its rules). PRM-based methods are averaged over the PRM seeds first, so
the unit of every interval is the held-out query (paired: every method answers the same queries).

The rules labelled the PRM's training pairs, so a decoder could raise its rule score by gaming them
(a reply of bullet points and nothing else). The fluency guard scores every reply with a judge that
labelled nothing: the base model's negative log-likelihood per token of the reply given the plain
query.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...claims import Claim, Estimate, exact, geometric_ratio, mean, paired_difference
from ...markdown import fmt, table
from .data import RULES

FLUENCY_MARGIN = 0.5
"""PAD's replies may cost the base model at most this many more nats per token than its own greedy
replies (ours: about 1.65x the perplexity)"""


def scores(texts: list[str], name: str, metrics: dict[str, Any]) -> np.ndarray:
    """Per query, the alignment of its reply (texts in query order) to preference ``name``: the
    mean over its parts (a combination has two) of the part's rule score, or of the part's reward
    model score (metrics["rm_scores"]); NaN where neither scores it."""
    parts = []
    for part in name.split("+"):
        if part in RULES:
            parts.append([RULES[part](t) for t in texts])
        elif part in metrics.get("rm_scores", {}):
            rm = metrics["rm_scores"][part]
            parts.append([rm.get(str(i), {}).get(t, math.nan) for i, t in enumerate(texts)])
        else:
            parts.append([math.nan] * len(texts))
    return np.mean(np.array(parts, dtype=float), axis=0)


def rule_scores(texts: list[str], name: str) -> np.ndarray:
    """Per reply, its alignment to ``name`` by the study's rules alone (NaN for a part without one):
    what the dev queries, which no reward model scores, can be judged by."""
    return scores(texts, name, {})


def prm_runs(metrics: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r for r in metrics["prms"] if r["kind"] == kind]


def method_scores(metrics: dict[str, Any], method: str, name: str, kind: str = "real") -> np.ndarray:
    """Per held-out query, the alignment of ``method``'s replies to preference ``name``: base
    (plain prompt), prompting (the personalised prompt), pad / gated / bon (mean over the PRM
    seeds of ``kind``)."""
    if method == "base":
        return scores(metrics["base"]["base"]["texts"], name, metrics)
    if method == "prompting":
        return scores(metrics["base"]["prompting"][name]["texts"], name, metrics)
    runs = [r for r in prm_runs(metrics, kind) if name in r.get(method, {})]
    if not runs:
        return np.full(len(metrics["queries"]), math.nan)
    return np.mean([scores(r[method][name]["texts"], name, metrics) for r in runs], axis=0)


def method_nll(metrics: dict[str, Any], method: str, name: str) -> np.ndarray:
    """Per held-out query, the base model's NLL per token of ``method``'s reply for preference
    ``name`` given the plain query (PRM-based methods: mean over the real PRM seeds); NaN where not
    measured."""
    n = len(metrics["queries"])
    if method == "base":
        return np.asarray(metrics["base"]["base"].get("nll", [math.nan] * n), float)
    if method == "prompting":
        return np.asarray(metrics["base"]["prompting"][name].get("nll", [math.nan] * n), float)
    rows = [r[method][name]["nll"] for r in prm_runs(metrics, "real") if "nll" in r.get(method, {}).get(name, {})]
    return np.nanmean(np.asarray(rows, float), axis=0) if rows else np.full(n, math.nan)


def mean_over(metrics: dict[str, Any], method: str, names: list[str], kind: str = "real") -> np.ndarray:
    return np.mean([method_scores(metrics, method, n, kind) for n in names], axis=0)


def cross_scores(metrics: dict[str, Any]) -> np.ndarray:
    """Per query: the score of each trained preference d under PAD asked for d, minus its mean
    score under PAD asked for each other trained preference (is PAD personal, or one style?)."""
    names = metrics["preferences"]["trained"]
    if len(names) < 2:
        return np.full(len(metrics["queries"]), math.nan)
    out = []
    for d in names:
        own = method_scores(metrics, "pad", d)
        others = [np.mean([scores(r["pad"][o]["texts"], d, metrics) for r in prm_runs(metrics, "real")], axis=0)
                  for o in names if o != d]
        out.append(own - np.mean(others, axis=0))
    return np.mean(out, axis=0)


def throughput(metrics: dict[str, Any], kind: str = "real") -> dict[str, np.ndarray]:
    """Tokens per second of base, PAD and gated PAD decoding one query at a time (a served
    request), per (PRM run, preference): each run timed its own base decoder in the same process."""
    base, pad, gated, calls = [], [], [], []
    for r in prm_runs(metrics, kind):
        b = r["base_single"]
        for name in r["pad_single"]:
            base.append(b["tokens"] / b["seconds"])
            pad.append(r["pad_single"][name]["tokens"] / r["pad_single"][name]["seconds"])
            gated.append(r["gated"][name]["tokens"] / r["gated"][name]["seconds"])
            g = r["gated"][name]
            calls.append(g["prm_calls"] / max(g["steps"], 1))
    return {"base": np.array(base), "pad": np.array(pad), "gated": np.array(gated), "prm_call_share": np.array(calls)}


def identity_share(metrics: dict[str, Any], key: str) -> float:
    """The share of (preference, query) replies of the first seed's PRM at ``key`` (the w = 0
    entry of the sweep, or k1) identical to the base model's greedy replies on the same queries and
    the same prompt (the personalised one where PAD's base reads the preference)."""
    dev = metrics.get("dev") or {}
    same, n = 0, 0
    for name, sweep in dev.get("sweep", {}).items():
        base = dev.get("base", {}).get(name, [])
        if key in sweep and base:
            same += sum(a == b for a, b in zip(sweep[key], base))
            n += len(base)
    return same / n if n else math.nan


def sweep_curve(metrics: dict[str, Any], key: str = "sweep") -> dict[str, list[tuple[float, float]]]:
    """Per preference, (w, mean rule alignment over the sweep's queries: the dev queries) on the
    first seed's PRM (``key`` "args_sweep": ARGS on the first seed's reward model)."""
    return {name: sorted((float(w), float(np.nanmean(rule_scores(t, name)))) for w, t in sweep.items() if w != "k1")
            for name, sweep in (metrics.get("dev") or {}).get(key, {}).items()}


def _finite(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs where both values are finite (an empty reply has no NLL)."""
    ok = np.isfinite(a) & np.isfinite(b)
    return a[ok], b[ok]


def claims(metrics: dict[str, Any], cfg) -> list[Claim]:
    trained, unseen = metrics["preferences"]["trained"], metrics["preferences"]["unseen"]
    out: list[Claim] = []
    w = metrics["settings"]["w"]
    for d in trained:
        pad = method_scores(metrics, "pad", d)
        out.append(Claim.above(
            f"beats_base_{d}", f"PAD (w = {w:g}) raises the alignment to '{d}' over base decoding on held-out queries "
                        "('beats' read as > 0)",
            paired_difference(pad, method_scores(metrics, "base", d)), 0.0,
            note="the paper's Table 2: PAD above the base on every dimension", source="paper-read"))
        out.append(Claim.above(
            f"beats_prompting_{d}", f"PAD raises the alignment to '{d}' over preference prompting "
                                   "('beats' read as > 0)",
            paired_difference(pad, method_scores(metrics, "prompting", d)), 0.0,
            note="the paper's Table 2 (reviewers: prompting is the strong cheap baseline)"
                 + ("; PAD's base reads the same personalised prompt, so PAD at w = 0 is prompting and this "
                    "measures what the PRM adds" if base_reads(metrics) == "preference" else ""),
            source="paper-read"))
        direct = method_scores(metrics, "prm_direct", d)
        if np.isfinite(direct).any():
            out.append(Claim.above(
                f"beats_prm_direct_{d}", f"PAD raises the alignment to '{d}' over its PRM decoded on its own "
                                        "(greedy on the personalised prompt): the base's guidance adds to the DPO "
                                        "model alone",
                paired_difference(pad, direct), 0.0,
                note="at w = 1 the base's logits cancel over the top k, and PAD is the PRM's greedy choice among "
                     "the base's top k", source="ours"))
        args = method_scores(metrics, "args", d)
        if np.isfinite(args).any():
            out.append(Claim.above(
                f"beats_args_{d}", f"PAD raises the alignment to '{d}' over ARGS (the base's top k re-scored by a "
                                   f"sequence reward model trained on the same pairs, w = "
                                   f"{metrics['settings'].get('args_w', float('nan')):g}) ('beats' read as > 0)",
                paired_difference(pad, args), 0.0,
                note="the paper's reward-guided decoding baseline (ARGS, which PAD builds on); each weight chosen on "
                     "the dev queries", source="paper-read"))
        nll = method_nll(metrics, "pad", d)
        if np.isfinite(nll).any():
            out.append(Claim.at_most(
                f"fluency_kept_{d}", f"PAD's replies for '{d}' stay fluent: the base model's NLL per token of them, "
                                     f"minus of its own greedy replies, at most {FLUENCY_MARGIN:g} nats (given the "
                                     "plain query; a judge that labelled no pair)",
                paired_difference(*_finite(nll, method_nll(metrics, "base", d))), FLUENCY_MARGIN,
                note="a guard against gaming the rules the PRM was trained on (queries where either reply is empty "
                     "left out)", source="ours"))
    for c in unseen:
        out.append(Claim.above(
            f"unseen_{c.replace('+', '_')}", f"PAD generalises to the unseen combination '{c}' ('generalises' read as "
                                               "above base decoding, > 0)",
            paired_difference(method_scores(metrics, "pad", c), method_scores(metrics, "base", c)), 0.0,
            note="the paper: PAD generalises to preferences not seen in training", source="paper-read"))
    if prm_runs(metrics, "shuffled"):
        out.append(Claim.above(
            "needs_learned_preference",
            "the gain comes from the learned preferences: PAD's PRM above a PRM trained on label-shuffled pairs",
            paired_difference(mean_over(metrics, "pad", trained), mean_over(metrics, "pad", trained, "shuffled")), 0.0,
            note="negative control: the same pairs with chosen and rejected swapped in a random half",
            source="ours"))
    if len(trained) >= 2:
        out.append(Claim.above(
            "personalised", "PAD is personal: a dimension scores higher when it is the one asked for",
            mean(cross_scores(metrics)), 0.0,
            note="per query: score of d asked for d, minus asked for another trained preference; mean over d",
            source="ours"))
    out.append(Claim.above(
        "beats_best_of_n", f"PAD above Best-of-{metrics['settings']['best_of_n']} ranked by the same reward "
                           "(mean over the trained preferences; 'beats' read as > 0)",
        paired_difference(mean_over(metrics, "pad", trained), mean_over(metrics, "bon", trained)), 0.0,
        note="the paper's baselines table", source="paper-read"))
    tp = throughput(metrics)
    if len(tp["pad"]):
        out.append(Claim.above(
            "gate_speeds_up", f"calling the PRM only below a top-2 margin of {metrics['settings']['margin']:g} "
                              "decodes faster than PAD (tokens/s ratio)",
            geometric_ratio(tp["gated"], tp["pad"]), 1.0,
            note="the practitioners' fix for PAD's cost (a PRM call per token); unit: a timed decode of "
                 "every held-out query (PRM seed x preference)", source="ours"))
    out.append(Claim.at_least("w0_is_base", "w = 0 gives exactly the base model's greedy replies on the prompt it "
                                            "reads (the sweep's queries)",
                              exact(identity_share(metrics, "0.0")), 1.0, check=True))
    out.append(Claim.at_least("k1_is_base", "k = 1 makes PAD a no-op (the base's greedy replies)",
                              exact(identity_share(metrics, "k1")), 1.0, check=True))
    return [c for c in out if not math.isnan(c.measured)]


def _ci(e: Estimate) -> str:
    if e.ci is None:
        return fmt(e.value, ".3f")
    return f"{fmt(e.value, '.3f')} [{fmt(e.ci[0], '.3f')}, {fmt(e.ci[1], '.3f')}]"


METHODS = (("base", "base decoding"), ("prompting", "preference prompting"), ("bon", "Best-of-N"),
           ("prm_direct", "the PRM decoded alone"), ("args", "ARGS (sequence reward model)"), ("pad", "PAD"), ("pad_variant", "PAD, {other}"),
           ("gated", "PAD, gated"), ("pad_shuffled", "PAD, shuffled-label PRM"))

BASE_READS = {"preference": "base reads the preference (official)", "plain": "base reads the plain query"}


def base_reads(metrics: dict[str, Any]) -> str:
    """What PAD's base model read in this run (runs before the setting: the plain query)."""
    return metrics["settings"].get("base_reads", "plain")


def alignment_table(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """Per preference and method: the mean alignment over held-out queries and its interval."""
    rows = []
    names = [*metrics["preferences"]["trained"], *metrics["preferences"]["unseen"]]
    for name in names:
        for key, label in METHODS:
            if key == "pad_shuffled":
                if not prm_runs(metrics, "shuffled"):
                    continue
                x = method_scores(metrics, "pad", name, "shuffled")
            else:
                x = method_scores(metrics, key, name)
            if np.isfinite(x).any():
                nll = method_nll(metrics, key, name) if key in ("base", "prompting", "pad", "prm_direct",
                                                                "pad_variant", "args") else None
                mine = base_reads(metrics)
                label = label.format(other=BASE_READS["plain" if mine == "preference" else "preference"])
                if key == "pad":
                    label = f"PAD ({BASE_READS[mine]})"
                rows.append({"preference": name, "method": key, "label": label, "est": mean(x),
                             "nll": None if nll is None or not np.isfinite(nll).any() else mean(nll[np.isfinite(nll)])})
    return rows


def report_md(metrics: dict[str, Any], cfg) -> str:
    s = metrics["settings"]
    parts = ["## Preference pairs", "",
             f"{metrics['pairs']['n']} pairs from the base model's own samples: "
             + ", ".join(f"{k} {v}" for k, v in metrics["pairs"]["by_preference"].items()) + ".", ""]
    parts += ["## PRM training (DPO)", "",
              table(["run", "steps", "first loss", "last loss", "seconds", "checkpoint (serve pad --prm)"],
                    [[t["label"], t["steps"], fmt(t["curve"][0]["loss"], ".3f") if t["curve"] else "-",
                      fmt(t["curve"][-1]["loss"], ".3f") if t["curve"] else "-", fmt(t["seconds"], ".0f"),
                      f"`{t.get('model', '-')}`"]
                     for t in metrics["training"]]), ""]
    rms = [t for t in metrics["training"] if t["kind"] == "rm"]
    if rms:
        parts += ["`seedN-rm`: ARGS's reward model (Bradley-Terry on the same pairs, loss from log 2); it ranks the "
                  "chosen reply of a training pair first in "
                  + ", ".join(f"{fmt(100 * t['accuracy'], '.0f')}% ({t['label']})" for t in rms if "accuracy" in t)
                  + f" of the pairs. ARGS decodes at w = {fmt(s.get('args_w') or float('nan'), 'g')} "
                  f"({'chosen on the dev queries' if s.get('args_w_chosen') == 'dev' else 'fixed by the config'}).",
                  ""]
    parts += [f"## Alignment on {len(metrics['queries'])} held-out queries (rule score, mean and 95% interval "
              f"over queries; PAD k = {s['k']}, w = {s['w']:g}, greedy, {s['max_tokens']} tokens; PAD's base model "
              f"reads {'the personalised prompt' if base_reads(metrics) == 'preference' else 'the plain query'})",
              "",
              table(["preference", "method", "alignment", "base NLL / token"],
                    [[r["preference"], r["label"], _ci(r["est"]), "-" if r["nll"] is None else _ci(r["nll"])]
                     for r in alignment_table(metrics)]), "",
              "base NLL / token: the base model's negative log-likelihood per token of the reply given the plain "
              "query (nats; the fluency guard, a judge that labelled no pair).", ""]
    tp = throughput(metrics)
    if len(tp["pad"]):
        parts += ["## Cost (tokens/s in the same process, per PRM run and preference)", "",
                  table(["decoder", "tokens/s (mean)", "vs base"],
                        [["base", fmt(float(np.mean(tp["base"])), ".1f"), "1"],
                         ["PAD", fmt(float(np.mean(tp["pad"])), ".1f"), _ci(geometric_ratio(tp["pad"], tp["base"]))],
                         [f"PAD gated (margin {s['margin']:g})", fmt(float(np.mean(tp["gated"])), ".1f"),
                          _ci(geometric_ratio(tp["gated"], tp["base"]))]]), "",
                  f"The gated decoder called the PRM at {fmt(100 * float(np.mean(tp['prm_call_share'])), '.0f')}% of "
                  "its steps.", ""]
    curve = sweep_curve(metrics)
    if curve:
        d = metrics.get("dev") or {}
        parts += [f"## Alignment against w (first seed's PRM, {len(d.get('queries', []))} "
                  f"{'dev' if d.get('on') == 'dev' else 'evaluation'} queries, rule scores; w = {s['w']:g}, "
                  f"{'chosen there' if s.get('w_chosen') == 'dev' else 'fixed by the config'})", "",
                  table(["preference", *[fmt(w, "g") for w, _ in next(iter(curve.values()))]],
                        [[name, *[fmt(v, ".3f") for _, v in pts]] for name, pts in curve.items()]), ""]
    args_curve = sweep_curve(metrics, "args_sweep")
    if args_curve:
        parts += [f"ARGS against w (first seed's reward model, the same queries; w = {fmt(s.get('args_w'), 'g')}):", "",
                  table(["preference", *[fmt(w, "g") for w, _ in next(iter(args_curve.values()))]],
                        [[name, *[fmt(v, ".3f") for _, v in pts]] for name, pts in args_curve.items()]), ""]
    ex = metrics["pairs"]["examples"][:2]
    if ex:
        parts += ["## Example pairs", ""]
        for p in ex:
            parts += [f"- **{p['preference']}** · {p['query']}", f"  - chosen: {p['chosen']!r}",
                      f"  - rejected: {p['rejected']!r}"]
        parts += [""]
    q = metrics["queries"][0]
    parts += ["## One held-out query, every decoder", "", f"Query: {q!r}", "",
              f"- base: {metrics['base']['base']['texts'][0]!r}"]
    for name in metrics["preferences"]["trained"][:3]:
        parts.append(f"- prompting ({name}): {metrics['base']['prompting'][name]['texts'][0]!r}")
        runs = prm_runs(metrics, "real")
        if runs:
            parts.append(f"- PAD ({name}): {runs[0]['pad'][name]['texts'][0]!r}")
    return "\n".join(parts + [""])
