"""knowledge_entropy: acquisition and retention from the probes' losses, the claims and the report.

For a continual run and an injected split S (paraphrase, once), with u(t) and s(t) the mean
negative log probability per target token of the unseen and of S's probes after step t, and
t = 0 the start model:

    A_S(t) = [u(t) - s(t)] - [u(0) - s(0)]

the fact-specific gain in log probability (nats per token), net of what continual training does to
facts of the same form that were never injected. Acquisition is A_S right after S's last injection
(paraphrase: the last round; once: the first), retained knowledge A_S at the end of the run, and
forgetting acquired - retained (the log probability lost again, nats per token: defined for every
run, where the share 1 - retained / acquired, used before 2026-12, is undefined when nothing was
acquired and dropped those seeds). A run's values are the means over the two splits. Pure
functions of the metrics.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...claims import Claim, mean, paired_difference
from ...markdown import fmt, table
from .data import INJECTED

MATCH_TOL = 0.10
"""two start checkpoints are at matched loss when the earlier one's pretraining loss is within 10%
of the later one's (ours): the comparison the step-matched one is confounded by, an early
checkpoint that has barely learnt the language"""
ENTROPY_RHO_BOUND = -0.8
"""the paper: knowledge entropy declines consistently over pretraining (its Figure 1 is close to
monotone); a rank correlation with the step of -0.8 or below is read as a consistent decline"""


def gains(run: dict[str, Any], schedule: dict[str, Any]) -> dict[str, float]:
    """Acquisition, retained knowledge and forgetting of one continual run (the module docstring)."""
    by_step = {int(p["step"]): p for p in run["curve"]}
    e0 = run["eval0"]
    last_round = schedule["inject_at"][-1] + 1
    first_round = schedule["inject_at"][0] + 1
    end = schedule["steps"]

    def a(split: str, step: int) -> float:
        p = by_step.get(step)
        if p is None:
            return math.nan
        return (p["unseen"] - p[split]) - (e0["unseen"] - e0[split])

    acq = {"paraphrase": a("paraphrase", last_round), "once": a("once", first_round)}
    kept = {s: a(s, end) for s in INJECTED}
    acquired = float(np.mean([acq[s] for s in INJECTED]))
    retained = float(np.mean([kept[s] for s in INJECTED]))
    return {"acquired": acquired, "retained": retained, "forgetting": acquired - retained,
            **{f"acquired_{s}": acq[s] for s in INJECTED}, **{f"retained_{s}": kept[s] for s in INJECTED}}


def _runs(metrics: dict[str, Any], arm: str, role: str, fraction: float | None = None,
          q: float | None = None) -> dict[int, dict[str, Any]]:
    out = {}
    for r in metrics["runs"]:
        if r["arm"] != arm or role not in r["roles"]:
            continue
        if fraction is not None and not math.isclose(r["fraction"], fraction):
            continue
        if q is not None and not math.isclose(r["q"], q):
            continue
        out[r["seed"]] = r
    return out


def arms(metrics: dict[str, Any]) -> dict[str, dict[int, dict[str, Any]]]:
    """The runs of each compared arm, by seed: ``start=<fraction>`` (plain), ``resuscitated``,
    ``random`` (the random-neuron control), ``q=1``."""
    starts = sorted({r["fraction"] for r in metrics["runs"] if r["arm"] == "plain"})
    out = {f"start={f:g}": _runs(metrics, "plain", "main", fraction=f) for f in starts}
    out["resuscitated"] = _runs(metrics, "resus", "main")
    out["random"] = _runs(metrics, "random", "main")
    out["q=1"] = _runs(metrics, "resus", "q1")
    return out


def per_seed(metrics: dict[str, Any], arm_runs: dict[int, dict[str, Any]], key: str) -> dict[int, float]:
    s = metrics["schedule"]
    if key.startswith("h_"):
        return {seed: math.nan if r.get(key) is None else float(r[key]) for seed, r in arm_runs.items()}
    return {seed: gains(r, s)[key] for seed, r in arm_runs.items()}


def _paired(a: dict[int, float], b: dict[int, float]):
    seeds = sorted(set(a) & set(b))
    x = np.array([a[k] for k in seeds], float)
    y = np.array([b[k] for k in seeds], float)
    ok = np.isfinite(x) & np.isfinite(y)
    return paired_difference(x[ok], y[ok])


def _paired_key(metrics: dict[str, Any], a: dict[int, dict[str, Any]], b: dict[int, dict[str, Any]], key: str):
    """``key`` of arm a minus arm b, paired by seed."""
    return _paired(per_seed(metrics, a, key), per_seed(metrics, b, key))


def pretrain_loss_at(metrics: dict[str, Any], seed: int, step: int, window: int = 4) -> float:
    """A seed's pretraining loss at ``step``: the mean of its last ``window`` logged losses up to
    that step (NaN where the run was not pre-trained here)."""
    curve = next((c.get("pretrain_loss") or [] for c in metrics["curves"] if c["seed"] == seed), [])
    logged = [p["loss"] for p in curve if p["step"] <= step]
    return float(np.mean(logged[-window:])) if logged else math.nan


def matched_start(metrics: dict[str, Any]) -> tuple[str | None, dict[str, float]]:
    """(the earliest start arm, before the last, whose pretraining loss is within :data:`MATCH_TOL`
    of the last start's, averaged over seeds; or None) and every start arm's mean loss."""
    a = arms(metrics)
    starts = [k for k in a if k.startswith("start=")]
    losses = {k: float(np.nanmean([pretrain_loss_at(metrics, seed, r["step"]) for seed, r in a[k].items()]
                                  or [math.nan])) for k in starts}
    last = losses[starts[-1]] if starts else math.nan
    for k in starts[:-1]:
        if np.isfinite(losses[k]) and np.isfinite(last) and losses[k] - last <= MATCH_TOL * last:
            return k, losses
    return None, losses


def spearman(x, y) -> float:
    from scipy import stats

    if len(x) < 3 or np.ptp(np.asarray(x, float)) == 0 or np.ptp(np.asarray(y, float)) == 0:
        return math.nan  # undefined for a constant input
    return float(stats.spearmanr(x, y).statistic)


def entropy_rhos(metrics: dict[str, Any]) -> list[float]:
    """Per seed, the rank correlation of H with the pretraining step over its checkpoints."""
    return [spearman([p["step"] for p in c["points"]], [p["h"] for p in c["points"]]) for c in metrics["curves"]]


def claims(metrics: dict[str, Any], cfg) -> list[Claim]:
    a = arms(metrics)
    starts = [k for k in a if k.startswith("start=")]
    early, late = a[starts[0]], a[starts[-1]]
    res = per_seed(metrics, a["resuscitated"], "h_resuscitated")
    start = per_seed(metrics, a["resuscitated"], "h_start")
    out = [
        Claim.at_most("entropy_decays", "Knowledge entropy decreases over pretraining (Spearman rho of H with the "
                      f"step, per pretraining seed; 'declines consistently' read as rho <= {ENTROPY_RHO_BOUND:g})",
                      mean(entropy_rhos(metrics)), ENTROPY_RHO_BOUND,
                      note="rank correlation over each seed's checkpoints (step 0 included when pretrained here)",
                      source="paper-read"),
        Claim.above("acquisition_decreases", f"Later checkpoints acquire less: A({starts[0]}) - A({starts[-1]}) "
                    "('less' read as > 0)",
                    _paired_key(metrics, early, late, "acquired"), 0.0,
                    note="A: fact-specific log-probability gain right after injection, nats/token",
                    source="paper-read"),
        Claim.above("forgetting_increases", f"Later checkpoints forget more: F({starts[-1]}) - F({starts[0]}) "
                    "('more' read as > 0)",
                    _paired_key(metrics, late, early, "forgetting"), 0.0,
                    note="F = acquired - retained by the end of the run, nats/token", source="paper-read"),
        Claim.above("resuscitation_acquires_more", "Resuscitation improves acquisition over the unmodified last "
                    "checkpoint: A(resuscitated) - A(last) ('improves' read as > 0)",
                    _paired_key(metrics, a["resuscitated"], late, "acquired"),
                    0.0, source="paper-read"),
        Claim.above("resuscitation_retains_more", "Resuscitation improves retention over the unmodified last "
                    "checkpoint: retained(resuscitated) - retained(last) ('improves' read as > 0)",
                    _paired_key(metrics, a["resuscitated"], late, "retained"),
                    0.0, note="retained: A at the end of the run, nats/token", source="paper-read"),
        Claim.above("resuscitation_beats_random", "The gain comes from the low-coefficient neurons: "
                    "A(resuscitated) - A(same factors on random neurons)",
                    _paired_key(metrics, a["resuscitated"], a["random"], "acquired"), 0.0,
                    note="negative control: as many random neurons per layer, each scaled by Algorithm 1's own "
                         "factor for it (mean C_bar / C_bar_j * q)", source="ours"),
        Claim.above("resuscitation_keeps_entropy", "The resuscitated model ends continual training with higher "
                    "knowledge entropy than the unmodified one: H_end(resuscitated) - H_end(last)",
                    _paired_key(metrics, a["resuscitated"], late, "h_final"),
                    0.0, source="ours"),
        Claim.above("resuscitation_raises_entropy", "Resuscitation raises knowledge entropy: H(resuscitated) - "
                    "H(last), before training", _paired(res, start), 0.0,
                    note="not by construction: q > 1 lifts the chosen neurons above the layer mean, which can "
                         "make an already even layer less even", source="ours"),
    ]
    matched, losses = matched_start(metrics)
    if matched is not None:
        gap = f"pretraining loss {losses[matched]:.3g} against {losses[starts[-1]]:.3g}"
        out += [
            Claim.above("acquisition_decreases_matched_loss", f"At matched loss, the later checkpoint acquires less: "
                        f"A({matched}) - A({starts[-1]}), the earliest start within {MATCH_TOL:.0%} of the last's "
                        "pretraining loss ('less' read as > 0)",
                        _paired_key(metrics, a[matched], late, "acquired"), 0.0, note=gap, source="paper-read"),
            Claim.above("forgetting_increases_matched_loss", f"At matched loss, the later checkpoint forgets more: "
                        f"F({starts[-1]}) - F({matched}) ('more' read as > 0)",
                        _paired_key(metrics, late, a[matched], "forgetting"), 0.0, note=gap, source="paper-read"),
        ]
    return out


def arm_table(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """Per arm: acquisition, retained knowledge, forgetting and entropies, mean and 95% interval over seeds."""
    rows = []
    for name, runs in arms(metrics).items():
        if not runs:
            continue
        row: dict[str, Any] = {"arm": name, "seeds": len(runs)}
        for key in ("acquired", "retained", "forgetting", "acquired_paraphrase", "acquired_once", "h_start",
                    "h_resuscitated", "h_final"):
            vals = [v for v in per_seed(metrics, runs, key).values() if np.isfinite(v)]
            row[key] = mean(vals) if vals else None
        # the start model's loss on the unseen probes before any continual step: arms starting from
        # barely trained checkpoints sit far above the rest
        row["start_loss"] = mean([float(r["eval0"]["unseen"]) for r in runs.values()])
        rows.append(row)
    return rows


def grid_table(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The (p, q) grid's runs (first seed): acquisition, retained, H after resuscitation and at the end."""
    s = metrics["schedule"]
    out = []
    for r in metrics["runs"]:
        if "grid" in r["roles"]:
            out.append({"ratio": r["ratio"], "q": r["q"], **gains(r, s), "h_resuscitated": r.get("h_resuscitated"),
                        "h_final": r["h_final"]})
    base = [r for r in metrics["runs"] if r["arm"] == "plain" and r["seed"] == min(metrics["seeds"])
            and math.isclose(r["fraction"], max(x["fraction"] for x in metrics["runs"] if x["arm"] == "plain"))]
    if base:
        out.append({"ratio": 0.0, "q": 0.0, **gains(base[0], s), "h_resuscitated": base[0]["h_start"],
                    "h_final": base[0]["h_final"]})
    return out


def entropy_vs_acquisition(metrics: dict[str, Any]) -> tuple[list[float], list[float]]:
    """(H of the start checkpoint, acquisition) of every plain continual run."""
    s = metrics["schedule"]
    pairs = [(r["h_start"], gains(r, s)["acquired"]) for r in metrics["runs"] if r["arm"] == "plain"]
    pairs = [(h, a) for h, a in pairs if np.isfinite(a)]
    return [h for h, _ in pairs], [a for _, a in pairs]


def _ci(e) -> str:
    if e is None:
        return "-"
    if e.ci is None or not all(map(math.isfinite, e.ci)):
        return fmt(e.value, ".3g")
    return f"{fmt(e.value, '.3g')} [{fmt(e.ci[0], '.3g')}, {fmt(e.ci[1], '.3g')}]"


def report_md(metrics: dict[str, Any], cfg) -> str:
    d = metrics.get("data") or {}
    parts = ["## Knowledge entropy over pretraining", ""]
    if d.get("probe_source"):
        parts += [f"H on {d.get('probe_docs')} probe documents ({d.get('probe_tokens')} tokens): "
                  f"{d['probe_source']}; facts: {d.get('facts', 'generated')}.", ""]
    rows = []
    for c in metrics["curves"]:
        for p in c["points"]:
            rows.append([c["seed"], p["step"], fmt(p["h"], ".4f"), fmt(p["h"] / p["h_max"], ".4f")])
    parts += [table(["seed", "step", "H", "H / (L log m)"], rows), ""]
    rhos = entropy_rhos(metrics)
    parts += [f"Spearman rho of H with the step, per seed: {', '.join(fmt(r, '.3f') for r in rhos)}.", ""]
    if metrics["models"]:
        parts += ["## Real pretrained models on the same probe documents", "",
                  table(["model", "layers x width", "H", "H / (L log m)"],
                        [[m["label"], f"{m['n_layers']} x {m['width']}", fmt(m["h"], ".3f"),
                          fmt(m["h"] / m["h_max"], ".4f")] for m in metrics["models"]]), "",
                  "Different widths and depths: the normalised value (the mean layer entropy over log m) is the one "
                  "to compare with the curve above.", ""]
    parts += ["## Continual training with injected facts (mean and 95% interval over seeds)", "",
              table(["arm", "seeds", "start loss", "acquired", "retained", "forgetting", "acq. paraphrase", "acq. once",
                     "H start", "H resuscitated", "H end"],
                    [[r["arm"], r["seeds"], *(_ci(r[k]) for k in ("start_loss", "acquired", "retained", "forgetting",
                                                                   "acquired_paraphrase", "acquired_once", "h_start",
                                                                   "h_resuscitated", "h_final"))]
                     for r in arm_table(metrics)]), "",
              "start loss: the start model's loss on the unseen probes before any continual step (nats per token). "
              "acquired / retained: fact-specific gain in log probability of the probes' targets (nats per token, "
              "against never-injected facts) right after injection / at the end of the run; forgetting: acquired - "
              "retained.", ""]
    matched, losses = matched_start(metrics)
    if losses and any(np.isfinite(v) for v in losses.values()):
        parts += ["Pretraining loss at each start (mean over seeds): " + ", ".join(
            f"{k} {fmt(v, '.3g')}" for k, v in losses.items()) + (
            f"; at matched loss (within {MATCH_TOL:.0%} of the last start's) the claims compare {matched} with the "
            "last start." if matched else f"; no earlier start is within {MATCH_TOL:.0%} of the last start's loss, "
            "so there is no matched-loss comparison in this run."), ""]
    h, acq = entropy_vs_acquisition(metrics)
    if len(h) >= 3:
        parts += [f"Across the plain runs (every seed and start checkpoint, n = {len(h)}), Spearman rho of the "
                  f"start checkpoint's H with its acquisition: {fmt(spearman(h, acq), '.3f')} (descriptive: the "
                  "checkpoints differ in more than H).", ""]
    grid = grid_table(metrics)
    if grid:
        parts += ["## Resuscitation grid (p, q), first seed", "",
                  table(["p", "q", "acquired", "retained", "forgetting", "H resuscitated", "H end"],
                        [["none" if g["ratio"] == 0 else fmt(g["ratio"], "g"), "-" if g["q"] == 0 else fmt(g["q"], "g"),
                          fmt(g["acquired"], ".3g"), fmt(g["retained"], ".3g"), fmt(g["forgetting"], ".3g"),
                          fmt(g["h_resuscitated"], ".4f"), fmt(g["h_final"], ".4f")] for g in grid]), ""]
    return "\n".join(parts)

