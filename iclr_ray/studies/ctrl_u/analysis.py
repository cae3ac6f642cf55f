"""ctrl_u's measurements and claims: pure functions of the metrics.

The unit is the seed. A seed fixes the post-training batches (scenes, timesteps, noise: the same for
every arm) and the evaluation's initial noise (the same for every model), from one pretrained base,
so the arms of a seed are paired. The claims take the t interval over seeds of paired differences.

Controllability is the *oracle's* mIoU on images drawn for held-out condition masks (the oracle is a
stronger segmenter than the reward model the arms optimise, as the paper's evaluators are stronger
than its reward models). Reward hacking is the gap between the reward model's mIoU and the oracle's
on the same images: a generator that learns to please the weak reward model's blind spots raises the
first more than the second."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...claims import Claim, mean
from ...markdown import table

PAPER = "paper: Ctrl-U's mIoU above ControlNet's and ControlNet++'s on ADE20K and COCO-Stuff (SD1.5)"
FID_TOLERANCE = 0.10
"""how much larger (relative) Ctrl-U's Fréchet distance may be than ControlNet's and still count as
not losing image quality: the paper reports FID on par or better; 10% is this study's allowance for
a distance estimated from a few hundred 32 px images, fixed before any run"""


def per_seed(metrics: dict[str, Any], model: str, key: str) -> np.ndarray:
    return np.asarray([metrics["scores"][model][str(s)][key] for s in metrics["seeds"]], float)


def hacking_gap(metrics: dict[str, Any], model: str) -> np.ndarray:
    """Per seed: the reward model's mIoU minus the oracle's, on the model's images."""
    return per_seed(metrics, model, "reward_miou") - per_seed(metrics, model, "oracle_miou")


def mean_uncertainty(metrics: dict[str, Any], model: str) -> float:
    """The mean per-sample U over post-training (in-window samples, after the ramp starts), over
    evaluations and seeds; NaN for an arm without U."""
    vals = [row[3] for curve in metrics["curves"].get(model, {}).values() for row in curve if len(row) > 3]
    return float(np.mean(vals)) if vals and model.startswith("ctrl_u") else float("nan")


def claim_arm(metrics: dict[str, Any]) -> tuple[str, str]:
    """The Ctrl-U arm the claims read, and how its Δt was set: the one chosen on validation, or
    post.dt (runs without a choice, and those from before it)."""
    ch = metrics.get("dt_choice") or {}
    arm = ch.get("chosen", "ctrl_u")
    how = (f"Δt = {ch['dt']}, chosen on validation" if ch.get("on") == "valid"
           else f"Δt = {metrics.get('dt')}, fixed by the config")
    return arm, how


def claims(metrics: dict[str, Any], cfg=None) -> list[Claim]:
    arms = metrics["arms"]
    out: list[Claim] = []
    seg = metrics.get("segmenters", {})
    if seg:
        out.append(Claim.above(
            "oracle_stronger_than_reward", "The oracle segmenter reads real held-out scenes better than the reward "
                                           "model does (mIoU, oracle minus reward)",
            seg["oracle"]["miou_real"] - seg["reward"]["miou_real"], 0.0, check=True,
            note="the premise of evaluating with the oracle"))
    if "ctrl_u" not in arms:
        return out
    cu, how = claim_arm(metrics)
    o = {a: per_seed(metrics, a, "oracle_miou") for a in arms}
    o["ctrl_u"] = per_seed(metrics, cu, "oracle_miou")
    if "controlnet" in arms:
        out.append(Claim.above(
            "ctrl_u_beats_controlnet", f"Ctrl-U ({how}) improves controllability over ControlNet: the oracle's "
                                       "mIoU on Ctrl-U's images is above ControlNet's (continued L_pre training, "
                                       "paired by seed; 'improves' read as > 0)", mean(o["ctrl_u"] - o["controlnet"]), 0.0,
            note=PAPER, source="paper-read"))
        fid = per_seed(metrics, cu, "fid") / per_seed(metrics, "controlnet", "fid") - 1
        out.append(Claim.at_most(
            "ctrl_u_keeps_quality", f"Without losing image quality: Ctrl-U's Fréchet distance to real held-out "
                                    f"images (oracle features) is at most {FID_TOLERANCE:.0%} above ControlNet's "
                                    f"(relative, paired by seed; the paper's 'FID on par' read as at most "
                                    f"{FID_TOLERANCE:.0%} above)", mean(fid), FID_TOLERANCE,
            note="paper: FID on par with or below the baselines'; the 10% allowance is this study's",
            source="paper-read"))
    if "reward" in arms:
        out.append(Claim.above(
            "ctrl_u_beats_reward", f"Ctrl-U ({how}) improves controllability over plain reward fine-tuning "
                                   "(ControlNet++): the oracle's mIoU is higher (paired by seed; 'improves' read as "
                                   "> 0)",
            mean(o["ctrl_u"] - o["reward"]), 0.0, note=PAPER, source="paper-read"))
        out.append(Claim.above(
            "ctrl_u_less_reward_hacking", "Fewer reward-hacking artefacts: the gap between the reward model's mIoU and "
                                          "the oracle's on the generated images is smaller for Ctrl-U than for "
                                          "plain reward fine-tuning (reward arm's gap minus Ctrl-U's, paired by seed; "
                                          "'robust to the reward model's errors' read as > 0)",
            mean(hacking_gap(metrics, "reward") - hacking_gap(metrics, cu)), 0.0,
            note="paper: uncertainty weighting makes reward feedback robust to the reward model's errors",
            source="paper-read"))
    if "controlnet" in arms and "reward" in arms:
        r = per_seed(metrics, "reward", "reward_miou") - per_seed(metrics, "controlnet", "reward_miou")
        out.append(Claim.above(
            "reward_tuning_raises_reward", "The reward fine-tuning optimises its reward: the reward model's mIoU on "
                                           "the reward arm's images is above ControlNet's (paired by seed)",
            mean(r), 0.0, note="the manipulation the other claims rest on (ControlNet++'s premise); it can fail "
                               "when the reward's gradient does not move the generator", source="ours"))
    return out


def _cell(v: np.ndarray, digits: int = 3) -> str:
    return f"{v.mean():.{digits}f} ± {v.std():.{digits}f}" if len(v) > 1 else f"{v.mean():.{digits}f}"


def report_md(metrics: dict[str, Any], cfg=None) -> str:
    n = len(metrics["seeds"])
    sz = metrics["sizes"]
    lines = [f"Data: blob scenes at {metrics['side']} x {metrics['side']} with 8-class masks, generated here; "
             f"{sz['train']} training scenes (the reward model saw {sz['reward_train']}), {sz['test']} held-out; "
             f"{metrics['images']} images drawn per model for the first held-out masks; {n} seeds (mean ± sd).", ""]
    seg = metrics.get("segmenters", {})
    if seg:
        lines += ["**Segmenters** (mIoU on the held-out real images; noisy: Gaussian noise of sd 0.1)", "",
                  table(["segmenter", "mIoU real", "mIoU noisy", "final loss"],
                        [[w, f"{v['miou_real']:.3f}", f"{v['miou_noisy']:.3f}", f"{v['final_loss']:.3f}"]
                         for w, v in seg.items()]), ""]
    rows = []
    ablation = metrics.get("ablation", {})
    for m in ["base", *metrics["arms"], *ablation]:
        if m not in metrics["scores"]:
            continue
        dt = ablation.get(m, metrics.get("dt")) if m.startswith("ctrl_u") else None
        u = mean_uncertainty(metrics, m)
        rows.append([m, "" if dt is None else str(dt), _cell(per_seed(metrics, m, "oracle_miou")),
                     _cell(per_seed(metrics, m, "reward_miou")), _cell(hacking_gap(metrics, m)),
                     _cell(per_seed(metrics, m, "fid"), 2), "" if np.isnan(u) else f"{u:.2e}"])
    lines += [f"**Generated images** (oracle mIoU = controllability; gap = reward mIoU - oracle mIoU; FD = Fréchet "
              f"distance to the real held-out images in the oracle's features, two halves of the real images: "
              f"{metrics['fid_real_halves']:.2f}; mean U = Ctrl-U's per-sample uncertainty during post-training, "
              f"in the reward window; the claims read {claim_arm(metrics)[0]} ({claim_arm(metrics)[1]}), the "
              "other Δt rows are the ablation)",
              "", table(["model", "Δt", "oracle mIoU", "reward mIoU", "gap", "FD", "mean U"], rows), ""]
    valid = (metrics.get("dt_choice") or {}).get("valid") or {}
    if valid:
        lines += ["Δt's choice: the oracle's mIoU on images for the validation masks, per Ctrl-U arm (mean over "
                  "seeds): " + ", ".join(f"{n} {np.mean(list(v.values())):.3f}" for n, v in valid.items()) + ".", ""]
    return "\n".join(lines)
