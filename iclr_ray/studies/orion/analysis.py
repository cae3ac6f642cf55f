"""orion claims and report: pure functions of the metrics.

An outcome is an exact hit: the patched run's top-1 token id is the expected answer's first token
(the official IIA's loose comparison, case-free and a prefix either way, so that a one-letter top
token matches any answer with that initial, is reported beside it as the *soft* variant). The
scored pairs reuse the task's few contexts, so every interval on pairs is a bootstrap by context
(x2's context C2: pairs on one context resampled together, the estimate resting on the number of
contexts); for oversight the unit is the distracted story. The per-pair outcomes at every layer
are in the metrics, so everything here is recomputed from result.json.

**Choosing the layer without peeking.** The paper reports the best layer of each sweep. Taking the
maximum over layers of the same pairs that are then scored biases the score up, so the pairs are
split: the even-numbered pairs choose the layer (the highest R1(C2) rate, ties to the higher mean
probability of R1(C2)), the odd-numbered ones are scored there.

Per model-task pair, judged only when the model answers ``min_clean_accuracy`` of the task's
prompts (the official plots' 0.7 filter):

* ``<model>_<task>_keeps_probability``: the normalised probability mean p_patched(R1(C2)) /
  mean p_clean(R1(C2)) on the scored pairs (p_clean: the model's probability of the same token on
  the clean input (C2, R1)), at least KEEP (the paper: >= 0.7 in 98/106 model-task pairs);
* ``<model>_<task>_request_band``: the share of scored pairs whose patched top-1 is R1(C2), at
  least BAND (a middle band where R1(C2) is the model's answer);
* ``<model>_<task>_request_above_chance``: that share minus the random-guess rate of R1(C2) (one
  over the number of distinct first tokens of R1's answers across the task's contexts), above 0.

Per model, pooled over its judged tasks (scored pairs):

* ``<model>_early_layers_keep_x2``: at the first layer the patch changes nothing: R2(C2) rate
  at least EARLY;
* ``<model>_same_request_keeps_answer``: the control request patching could fail: patch in the
  residual of x4 = (C3, R2), x2's own request on a third context, at the chosen layer; if the
  patch carries the request, x2 still answers R2(C2); if it carried the answer, it would say
  R2(C3). R2(C2) rate at least BAND;
* ``<model>_oversight_raises_accuracy``: accuracy on distracted stories with the trusted input's
  residual patched in, minus without (paired over stories), at least OVERSIGHT.

Checks: at the last layer the patched run is x1's own last step, so its top-1 is x1's clean top-1
on every pair (by construction); an unrelated prompt's residual or norm-matched noise patched at
the chosen layer gives R1(C2) at most CONTROL of the time (off-distribution inputs no method
should turn into the request: "garbage in", kept as checks).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...claims import Claim, bootstrap, exact, paired_difference
from ...markdown import fmt, table

KEEP = 0.7
"""normalised probability the paper holds a decomposition to (98 of 106 model-task pairs)"""
BAND = 0.5
"""R1(C2) must be the majority outcome at the chosen layer"""
EARLY = 0.9
CONTROL = 0.1
OVERSIGHT = 0.25
"""accuracy points oversight must add on distracted stories (the paper: 15.5% -> 97.5% on Pythia-12b)"""

OUTCOMES = ("r2c2", "r1c2", "r1c1")
SAME = ("same_r2c2", "same_r2c3")
"""the same-request control's outcomes: x2's answer kept (expected) / the third context's answer"""
LABELS = {"r2c2": "R2(C2) (no effect)", "r1c2": "R1(C2) (request moved)", "r1c1": "R1(C1) (answer moved)"}


def merge_bands(bands: list[dict[str, Any]]) -> dict[str, Any]:
    """One per-layer table from the bands' (layers in order; every key a list per layer of per-pair
    values)."""
    bands = sorted(bands, key=lambda b: b["layers"][0] if b["layers"] else 0)
    out: dict[str, Any] = {"layers": [x for b in bands for x in b["layers"]]}
    for key in bands[0]:
        if key != "layers":
            out[key] = [row for b in bands for row in b[key]]
    return out


def halves(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(pairs that choose the layer, pairs scored there): even and odd positions."""
    idx = np.arange(n)
    return idx[idx % 2 == 0], idx[idx % 2 == 1]


def select_layer(cell: dict[str, Any]) -> int | None:
    """The layer with the highest R1(C2) rate on the choosing half (ties: higher mean p(R1(C2)))."""
    pl = cell["per_layer"]
    n = len(cell["pairs"])
    if n < 2:
        return None
    pick, _ = halves(n)
    rate = [float(np.mean(np.asarray(r)[pick])) for r in pl["r1c2"]]
    prob = [float(np.mean(np.asarray(p)[pick])) for p in pl["p_r1c2"]]
    best = max(range(len(rate)), key=lambda i: (rate[i], prob[i], -i))
    return int(pl["layers"][best])


def _at(cell: dict[str, Any], key: str, layer: int) -> np.ndarray:
    pl = cell["per_layer"]
    return np.asarray(pl[key][pl["layers"].index(layer)], float)


def scored(cell: dict[str, Any]) -> dict[str, Any] | None:
    """The chosen layer's outcomes on the scored half (None without pairs to score)."""
    layer = cell.get("selected_layer")
    n = len(cell["pairs"])
    if layer is None or n < 2:
        return None
    _, idx = halves(n)
    p_clean = np.asarray(cell["p_clean"], float)[idx]
    out = {"layer": layer, "n": len(idx), "p_clean": p_clean,
           "ctx": np.asarray([f"{cell['task']}:{p[2]}" for p in cell["pairs"]])[idx]}
    for key in (*OUTCOMES, "p_r1c2", "logit_diff", "unrelated_r1c2", "noise_r1c2", "unrelated_r2c2", "noise_r2c2",
                *SAME, *(f"{k}_soft" for k in OUTCOMES)):
        if key in cell["per_layer"]:  # the same-request control and soft hits: runs from 2026-12 on
            out[key] = _at(cell, key, layer)[idx]
    if "chance" in cell:
        out["chance"] = np.asarray(cell["chance"], float)[idx]
    if "c3" in cell:
        out["has_c3"] = np.asarray([c is not None for c in cell["c3"]])[idx]
    return out


def normalised_probability(p_patched: np.ndarray, p_clean: np.ndarray, ctx: np.ndarray | None = None):
    """mean p_patched / mean p_clean, bootstrapped by context (``ctx``: a label per pair)."""
    return bootstrap((p_patched, p_clean), lambda a, b: float(np.mean(a) / np.mean(b)) if np.mean(b) > 0 else np.nan,
                     clusters=ctx)


def rate(hits: np.ndarray, ctx: np.ndarray):
    """The share of hits, bootstrapped by context."""
    return bootstrap(np.asarray(hits, float), np.mean, clusters=ctx)


def judged(cell: dict[str, Any], cfg) -> bool:
    return cell["accuracy"] >= cfg.min_clean_accuracy and len(cell["pairs"]) >= 2


def short_name(model: str) -> str:
    """A model id as an identifier part (claim ids, figure names)."""
    return model.split("/")[-1].replace("-", "_").replace(".", "_")


def claims(metrics: dict[str, Any], cfg) -> list[Claim]:
    out: list[Claim] = []
    cells = metrics["cells"]
    for model in metrics["models"]:
        m = short_name(model)
        mine = [c for c in cells if c["model"] == model]
        pooled: dict[str, list[np.ndarray]] = {k: [] for k in (
            "r2c2_first", "first_ctx", "unrelated_r1c2", "noise_r1c2", "control_ctx", "same_r2c2", "same_ctx")}
        for cell in mine:
            s = scored(cell)
            if s is None or not judged(cell, cfg):
                continue
            t, ctx = cell["task"], s["ctx"]
            where = f"layer {s['layer']}, chosen on the other half of the pairs; {len(set(ctx))} contexts"
            out.append(Claim.at_least(
                f"{m}_{t}_keeps_probability",
                f"{model}, {t}: request patching keeps >= 70% of the clean probability of R1(C2) (Abstract: "
                ">= 70% kept in 98 of 106 model-task pairs)",
                normalised_probability(s["p_r1c2"], s["p_clean"], ctx), KEEP, note=where, source="paper"))
            out.append(Claim.at_least(
                f"{m}_{t}_request_band", f"{model}, {t}: at a middle layer the patched output is R1(C2) "
                "('the output becomes R1(C2)' read as on at least half the pairs)",
                rate(s["r1c2"], ctx), BAND, note=where, source="paper-read"))
            if "chance" in s:
                out.append(Claim.above(
                    f"{m}_{t}_request_above_chance",
                    f"{model}, {t}: the patched output is R1(C2) more often than a random guess among R1's answers",
                    bootstrap((s["r1c2"], s["chance"]), lambda h, c: float(np.mean(h) - np.mean(c)), clusters=ctx),
                    0.0, note=f"{where}; guess rate {float(np.mean(s['chance'])):.2f}", source="ours"))
            _, idx = halves(len(cell["pairs"]))
            pooled["r2c2_first"].append(_at(cell, "r2c2", cell["per_layer"]["layers"][0])[idx])
            pooled["first_ctx"].append(ctx)
            pooled["unrelated_r1c2"].append(s["unrelated_r1c2"])
            pooled["noise_r1c2"].append(s["noise_r1c2"])
            pooled["control_ctx"].append(ctx)
            if "same_r2c2" in s and "has_c3" in s:
                pooled["same_r2c2"].append(s["same_r2c2"][s["has_c3"]])
                pooled["same_ctx"].append(ctx[s["has_c3"]])
        if pooled["r2c2_first"]:
            first, fctx = np.concatenate(pooled["r2c2_first"]), np.concatenate(pooled["first_ctx"])
            out.append(Claim.at_least(f"{m}_early_layers_keep_x2",
                                      f"{model}: patching at the first layer leaves x2's answer R2(C2)",
                                      rate(first, fctx), EARLY, note="judged tasks pooled", source="ours"))
            if pooled["same_r2c2"]:
                same, sctx = np.concatenate(pooled["same_r2c2"]), np.concatenate(pooled["same_ctx"])
                out.append(Claim.at_least(
                    f"{m}_same_request_keeps_answer",
                    f"{model}: patching in (C3, R2), x2's own request on a third context, keeps x2's answer R2(C2) "
                    "(a patch that moved the answer would say R2(C3))",
                    rate(same, sctx), BAND, note="the control request patching could fail; judged tasks pooled, "
                    "each task's chosen layer", source="ours"))
            for ctrl, what in (("unrelated", "an unrelated prompt's residual"), ("noise", "norm-matched noise")):
                x = np.concatenate(pooled[f"{ctrl}_r1c2"])
                out.append(Claim.at_most(f"{m}_{ctrl}_patch_gives_no_request",
                                         f"{model}: patching {what} at the chosen layer does not give R1(C2)",
                                         rate(x, np.concatenate(pooled["control_ctx"])), CONTROL, check=True,
                                         note="off-distribution input, judged tasks pooled"))
        over = metrics.get("oversight", {}).get(model)
        if over and len(over["plain"]) >= 2:
            out.append(Claim.at_least(
                f"{m}_oversight_raises_accuracy",
                f"{model}: one trusted input's residual raises accuracy on distracted stories (by >= "
                f"{100 * OVERSIGHT:g} points: our bound, well below the paper's gain)",
                paired_difference(over["patched"], over["plain"]), OVERSIGHT,
                note=f"layer {over['layer']}; paper: 15.5% -> 97.5% on Pythia-12b", source="ours"))
        last = [c for c in mine if c["pairs"]]
        if last:
            rates = [float(np.mean(c["per_layer"]["x1_top1"][-1])) for c in last]
            out.append(Claim.at_least(f"{m}_last_layer_is_x1",
                                      f"{model}: patching after the last block gives x1's own top-1",
                                      exact(min(rates)), 1.0, check=True, note="by construction"))
    return out


def cell_row(cell: dict[str, Any], cfg, s: dict[str, Any] | None, npb) -> list[str]:
    """A row of the per model-task table (``s``: :func:`scored`; ``npb``: its normalised probability)."""
    def mean(key: str, mask=None) -> str:
        if s is None or key not in s:
            return "-"
        x = s[key] if mask is None else s[key][mask]
        return fmt(float(x.mean()), ".2f") if len(x) else "-"

    soft = f" ({fmt(cell['accuracy_soft'], '.2f')})" if "accuracy_soft" in cell else ""
    base = [cell["model"], cell["task"], fmt(cell["accuracy"], ".2f") + soft, str(len(cell["pairs"]))]
    if s is None:
        return base + ["-"] * 9
    c3 = s.get("has_c3")
    r1c2 = mean("r1c2") + (f" ({mean('r1c2_soft')})" if "r1c2_soft" in s else "")
    return base + [str(s["layer"]), mean("r2c2"), r1c2, mean("r1c1"), mean("chance"), fmt(npb.value, ".2f"), fmt(float(s["logit_diff"].mean()), ".2f"),
                   f"{mean('same_r2c2', c3)} / {mean('same_r2c3', c3)}",
                   f"{mean('unrelated_r1c2')} / {mean('noise_r1c2')}" + ("" if judged(cell, cfg) else " (not judged)")]


def report_md(metrics: dict[str, Any], cfg) -> str:
    """The per model-task table, the oversight table and an example prompt (the CLI puts the
    claims and checks above)."""
    scores = [scored(c) for c in metrics["cells"]]
    npbs = [normalised_probability(s["p_r1c2"], s["p_clean"], s["ctx"]) if s is not None else None for s in scores]
    lines = []
    if not all(m["pretrained"] for m in metrics["models"].values()):
        lines += ["**A randomly initialised tiny model is in this run (the smoke preset): the mechanics run, "
                  "its claims say nothing about the paper.**", ""]
    lines += ["Models: " + "; ".join(f"`{k}` ({v['label']}, {v['layers']} layers)"
                                     for k, v in metrics["models"].items()), "",
              "## Per model and task (scored half of the pairs, at the chosen layer)", "",
              "Clean accuracy: share of the task's prompts answered (top-1 = the answer's first token id; in "
              "brackets the official loose match, case-free and a prefix either way). Pairs: kept by the filter. A "
              f"pair is judged when clean accuracy >= {cfg.min_clean_accuracy}. R1(C2): exact hits (loose in "
              "brackets); guess: the random-guess rate of R1(C2). Same request: patching (C3, R2), R2(C2) kept / "
              "R2(C3) said. Off-distribution: R1(C2) rate with an unrelated prompt's residual / noise.", "",
              table(["model", "task", "clean acc", "pairs", "layer", "R2(C2)", "R1(C2)", "R1(C1)", "guess", "norm. p",
                     "logit diff", "same request", "off-distribution"],
                    [cell_row(c, cfg, s, npb) for c, s, npb in zip(metrics["cells"], scores, npbs)]), ""]
    keep = [npb.value for c, npb in zip(metrics["cells"], npbs) if judged(c, cfg) and npb is not None]
    if keep:
        lines += [f"Model-task pairs keeping >= 70% of the probability (point estimates): "
                  f"{sum(k >= KEEP for k in keep)} of {len(keep)} judged (the paper: 98 of 106).", ""]
    if metrics.get("oversight"):
        rows = []
        for model, o in metrics["oversight"].items():
            rows.append([model, str(o["layer"]), str(len(o["plain"])), fmt(float(np.mean(o["no_distractor"])), ".2f"),
                         fmt(float(np.mean(o["plain"])), ".2f"), fmt(float(np.mean(o["patched"])), ".2f"),
                         fmt(float(np.mean(o["plain_distractor"])), ".2f"),
                         fmt(float(np.mean(o["patched_distractor"])), ".2f")])
        lines += ["## Oversight (distracted nanoQA stories, the city question)", "",
                  table(["model", "layer", "stories", "acc. without distractor", "acc. distracted",
                         "acc. distracted + patch", "says distractor city", "says it + patch"], rows), ""]
    ex = next((c for c in metrics["cells"] if c.get("example")), None)
    if ex:
        lines += ["## An example prompt (x2 of the first pair)", "", "```", ex["example"], "```", ""]
    return "\n".join(lines)
