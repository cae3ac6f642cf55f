"""orion claims and report: pure functions of the metrics.

The unit of every interval is the patching pair (x1, x2), drawn independently from the task's
prompts; for oversight, the distracted story. The per-pair outcomes at every layer are in the
metrics, so everything here is recomputed from result.json.

**Choosing the layer without peeking.** The paper reports the best layer of each sweep. Taking the
maximum over layers of the same pairs that are then scored biases the score up, so the pairs are
split: the even-numbered pairs choose the layer (the highest R1(C2) rate, ties to the higher mean
probability of R1(C2)), the odd-numbered ones are scored there.

Per model-task pair, judged only when the model answers ``min_clean_accuracy`` of the task's
prompts (the official plots' 0.7 filter):

* ``<model>_<task>_keeps_probability``: the normalised probability mean p_patched(R1(C2)) /
  mean p_clean(R1(C2)) on the scored pairs (p_clean: the model's probability of the same token on
  the clean input (C2, R1)), a pair bootstrap, at least KEEP (the paper: >= 0.7 in 98/106
  model-task pairs);
* ``<model>_<task>_request_band``: the share of scored pairs whose patched top-1 is R1(C2), a
  Wilson interval, at least BAND (a middle band where R1(C2) is the model's answer).

Per model, pooled over its judged tasks (scored pairs):

* ``<model>_early_layers_keep_x2``: at the first layer the patch changes nothing: R2(C2) rate
  at least EARLY;
* ``<model>_unrelated_patch_gives_no_request`` / ``<model>_noise_patch_gives_no_request``: the
  negative controls, an unrelated prompt's residual or norm-matched noise patched at each task's
  chosen layer: R1(C2) rate at most CONTROL;
* ``<model>_oversight_raises_accuracy``: accuracy on distracted stories with the trusted input's
  residual patched in, minus without (paired over stories), at least OVERSIGHT.

Check (by construction): at the last layer the patched run is x1's own last step, so its top-1 is
x1's clean top-1 on every pair.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...claims import Claim, bootstrap, exact, paired_difference, proportion
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
    out = {"layer": layer, "n": len(idx), "p_clean": p_clean}
    for key in (*OUTCOMES, "p_r1c2", "logit_diff", "unrelated_r1c2", "noise_r1c2", "unrelated_r2c2", "noise_r2c2"):
        out[key] = _at(cell, key, layer)[idx]
    return out


def normalised_probability(p_patched: np.ndarray, p_clean: np.ndarray):
    return bootstrap((p_patched, p_clean), lambda a, b: float(np.mean(a) / np.mean(b)) if np.mean(b) > 0 else np.nan)


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
        pooled: dict[str, list[np.ndarray]] = {"r2c2_first": [], "unrelated_r1c2": [], "noise_r1c2": []}
        for cell in mine:
            s = scored(cell)
            if s is None or not judged(cell, cfg):
                continue
            t = cell["task"]
            out.append(Claim.at_least(
                f"{m}_{t}_keeps_probability",
                f"{model}, {t}: request patching keeps >= 70% of the clean probability of R1(C2) (Abstract: "
                ">= 70% kept in 98 of 106 model-task pairs)",
                normalised_probability(s["p_r1c2"], s["p_clean"]), KEEP,
                note=f"layer {s['layer']}, chosen on the other half of the pairs", source="paper"))
            out.append(Claim.at_least(
                f"{m}_{t}_request_band", f"{model}, {t}: at a middle layer the patched output is R1(C2) "
                "('the output becomes R1(C2)' read as on at least half the pairs)",
                proportion(int(s["r1c2"].sum()), s["n"]), BAND, note=f"layer {s['layer']}", source="paper-read"))
            _, idx = halves(len(cell["pairs"]))
            pooled["r2c2_first"].append(_at(cell, "r2c2", cell["per_layer"]["layers"][0])[idx])
            pooled["unrelated_r1c2"].append(s["unrelated_r1c2"])
            pooled["noise_r1c2"].append(s["noise_r1c2"])
        if pooled["r2c2_first"]:
            first = np.concatenate(pooled["r2c2_first"])
            out.append(Claim.at_least(f"{m}_early_layers_keep_x2",
                                      f"{model}: patching at the first layer leaves x2's answer R2(C2)",
                                      proportion(int(first.sum()), len(first)), EARLY, note="judged tasks pooled",
                                      source="ours"))
            for ctrl, what in (("unrelated", "an unrelated prompt's residual"), ("noise", "norm-matched noise")):
                x = np.concatenate(pooled[f"{ctrl}_r1c2"])
                out.append(Claim.at_most(f"{m}_{ctrl}_patch_gives_no_request",
                                         f"{model}: patching {what} at the chosen layer does not give R1(C2)",
                                         proportion(int(x.sum()), len(x)), CONTROL,
                                         note="negative control, judged tasks pooled", source="ours"))
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
    base = [cell["model"], cell["task"], fmt(cell["accuracy"], ".2f"), str(len(cell["pairs"]))]
    if s is None:
        return base + ["-"] * 7
    return base + [str(s["layer"]), fmt(float(s["r2c2"].mean()), ".2f"), fmt(float(s["r1c2"].mean()), ".2f"),
                   fmt(float(s["r1c1"].mean()), ".2f"), fmt(npb.value, ".2f"), fmt(float(s["logit_diff"].mean()), ".2f"),
                   f"{fmt(float(s['unrelated_r1c2'].mean()), '.2f')} / {fmt(float(s['noise_r1c2'].mean()), '.2f')}"
                   + ("" if judged(cell, cfg) else " (not judged)")]


def report_md(metrics: dict[str, Any], cfg) -> str:
    """The per model-task table, the oversight table and an example prompt (the CLI puts the
    claims and checks above)."""
    scores = [scored(c) for c in metrics["cells"]]
    npbs = [normalised_probability(s["p_r1c2"], s["p_clean"]) if s is not None else None for s in scores]
    lines = []
    if not all(m["pretrained"] for m in metrics["models"].values()):
        lines += ["**A randomly initialised tiny model is in this run (the smoke preset): the mechanics run, "
                  "its claims say nothing about the paper.**", ""]
    lines += ["Models: " + "; ".join(f"`{k}` ({v['label']}, {v['layers']} layers)"
                                     for k, v in metrics["models"].items()), "",
              "## Per model and task (scored half of the pairs, at the chosen layer)", "",
              "Clean accuracy: share of the task's prompts answered (top-1 = the answer's first token). Pairs: "
              f"kept by the filter. A pair is judged when clean accuracy >= {cfg.min_clean_accuracy}. "
              "Controls: R1(C2) rate with an unrelated prompt's residual / noise.", "",
              table(["model", "task", "clean acc", "pairs", "layer", "R2(C2)", "R1(C2)", "R1(C1)", "norm. p",
                     "logit diff", "controls"],
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
