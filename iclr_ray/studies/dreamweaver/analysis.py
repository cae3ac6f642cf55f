"""dreamweaver's measurements and claims: pure functions of the metrics.

The unit is the seed. A seed fixes the initial weights (both objectives of a seed start from the
same model, and its untrained model is that model), the batch order and the evaluation clips, so
the objectives and the untrained control of a seed are paired. The claims take the t interval over
seeds of paired differences, on the in-distribution test videos."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...claims import Claim, mean
from ...markdown import table

PAPER = "paper: Dreamweaver's DCI above reconstruction-based slot models (SysBinder, STEVE) on its video sets"


def per_seed(metrics: dict[str, Any], model: str, key: str, split: str = "test") -> np.ndarray:
    """A DCI quantity of ``model`` per seed: I_static / I_dynamic, accuracy.<factor>, or
    <subset>.<D|C> with subset all, static or dynamic."""
    by = metrics["dci"][model][split]
    out = []
    for s in metrics["seeds"]:
        v = by[str(s)]
        for part in key.split("."):
            v = v[part]
        out.append(float(v))
    return np.asarray(out)


def imagination(metrics: dict[str, Any], objective: str, which: str, factor: str) -> np.ndarray:
    return np.asarray([metrics["imagination"][objective][str(s)][which][factor] for s in metrics["seeds"]], float)


def claims(metrics: dict[str, Any], cfg=None) -> list[Claim]:
    objectives = metrics["objectives"]
    out: list[Claim] = []
    if "predict" not in objectives:
        return out
    if "reconstruct" in objectives:
        for key, name in (("I_dynamic", "informativeness (held-out accuracy of the trees)"),
                          ("dynamic.C", "completeness")):
            out.append(Claim.above(
                f"predict_beats_reconstruct_dynamic_{key.split('.')[-1].split('_')[0]}",
                f"The predictive objective's slots have a higher DCI {name} for the dynamic factors (direction, "
                f"speed) than the reconstruction objective's (paired by seed; 'beats' read as > 0)",
                mean(per_seed(metrics, "predict", key) - per_seed(metrics, "reconstruct", key)), 0.0, note=PAPER,
                source="paper-read"))
    mono = metrics.get("baseline")
    if mono and mono in metrics["dci"]:
        out.append(Claim.above(
            "blocks_beat_monolithic_static_D", "Blocks disentangle the static factors (colour, shape, size) beyond "
                                               "what a slot without blocks gives: the predictive model's DCI "
                                               "disentanglement over them minus that of the same model with one "
                                               "block per slot (same size, budget and seed; its slots cut into as "
                                               "many equal chunks), paired by seed ('bind to static factors' and "
                                               "'above the slot baselines' read as > 0)",
            mean(per_seed(metrics, "predict", "static.D") - per_seed(metrics, mono, "static.D")), 0.0,
            note="paper: blocks bind to static factors without supervision; Dreamweaver's DCI above STEVE-like "
                 "slot models", source="paper-read"))
    out.append(Claim.above(
        "blocks_disentangle_static", "The trained predictive model's DCI disentanglement over the static factors is "
                                     "above its untrained model's (paired by seed)",
        mean(per_seed(metrics, "predict", "static.D") - per_seed(metrics, "untrained", "static.D")), 0.0,
        note="nearly by construction (an untrained RBSU's blocks read nothing in particular); the claim the "
             "method can fail is blocks_beat_monolithic_static_D", check=True))
    out.append(Claim.above(
        "predict_informative", "Training makes the slots informative: the predictive model's DCI informativeness "
                               "over all factors is above its untrained model's (paired by seed)",
        mean(per_seed(metrics, "predict", "I_static") + per_seed(metrics, "predict", "I_dynamic")
             - per_seed(metrics, "untrained", "I_static") - per_seed(metrics, "untrained", "I_dynamic")), 0.0,
        note="an untrained RBSU's slots, matched and probed the same way", check=True))
    for g in metrics["static"]:
        if g not in metrics["imagination"]["predict"][str(metrics["seeds"][0])]["swap"]:
            continue
        out.append(Claim.above(
            f"imagination_swaps_{g}", f"Compositional imagination: swapping the blocks that hold {g} between two "
                                      f"objects' slots makes the drawn frame show each object with the other's {g} "
                                      f"more often than swapping as many of its least important blocks (the share "
                                      f"of objects read with the partner's {g}, swap minus control, paired by seed; "
                                      "the paper's qualitative block swaps read as > 0)",
            mean(imagination(metrics, "predict", "swap", g) - imagination(metrics, "predict", "control", g)), 0.0,
            note="paper: block swaps between slots compose novel objects (shown qualitatively; measured here)",
            source="paper-read"))
    return out


def _cell(v: np.ndarray) -> str:
    return f"{v.mean():.3f} ± {v.std():.3f}" if len(v) > 1 else f"{v.mean():.3f}"


def report_md(metrics: dict[str, Any], cfg=None) -> str:
    n = len(metrics["seeds"])
    sz = metrics["sizes"]
    lines = [f"Data: Moving-Sprites-like videos at {metrics['side']} x {metrics['side']}, {metrics['objects']} "
             f"sprites; {sz['train']} training, {sz['test']} test and {sz['ood']} out-of-distribution videos (unseen "
             f"colour-shape pairs); {metrics['blocks']} blocks per slot; {n} seeds (mean ± sd).", ""]
    models = [*metrics["objectives"], *([metrics["baseline"]] if metrics.get("baseline") else []), "untrained"]
    for split in ("test", "ood"):
        rows = []
        for m in models:
            if split not in metrics["dci"].get(m, {}):
                continue
            rows.append([m, *[_cell(per_seed(metrics, m, k, split)) for k in (
                "static.D", "static.C", "I_static", "dynamic.C", "I_dynamic", "all.D", "all.C")],
                *[f"{per_seed(metrics, m, 'accuracy.' + g, split).mean():.2f}" for g in metrics["factors"]]])
        if rows:
            lines += [f"**DCI on the {split} videos** (slots of the last conditioning step, factors of the first "
                      "predicted frame; I = the trees' held-out accuracy)", "",
                      table(["model", "D static", "C static", "I static", "C dynamic", "I dynamic", "D all", "C all",
                             *[f"acc {g}" for g in metrics["factors"]]], rows), ""]
    rows = []
    for o in metrics["objectives"]:
        first = metrics["imagination"][o][str(metrics["seeds"][0])]
        for g in first["swap"]:
            rows.append([o, g, f"{imagination(metrics, o, 'fidelity', g).mean():.2f}",
                         f"{imagination(metrics, o, 'swap', g).mean():.2f}",
                         f"{imagination(metrics, o, 'control', g).mean():.2f}", str(first["n"][g]),
                         f"{first['reader_accuracy'][g]:.2f}", str(first["blocks"][g]["swap"])])
    lines += ["**Imagination by block swap** (drawn frames read by classifiers trained on real frames: fidelity = "
              "the share read with the object's own value without a swap; swap / control = the share read with the "
              "partner's value after swapping the factor's blocks / as many of its least important blocks)", "",
              table(["objective", "factor", "fidelity", "swap", "control", "pairs (seed 1)", "reader acc",
                     "blocks (seed 1)"], rows), ""]
    return "\n".join(lines)
