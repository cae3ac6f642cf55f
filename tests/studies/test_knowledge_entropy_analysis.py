"""knowledge_entropy's measures and claims on metrics built by hand: acquisition and retention
from the probes' losses, every claim holding on a clear effect and not holding on its negative
control (no effect, a reversed effect, the random-neuron control as good as resuscitation)."""
import numpy as np
import pytest

from iclr_ray.studies.knowledge_entropy import analysis

SCHEDULE = {"rounds": 2, "round_steps": 2, "steps": 6, "inject_at": [1, 3]}


def run(seed, arm, fraction, acquired, retained, roles=("main",), q=2.0, h_final=9.0, rng=None, noise=0.0):
    """A continual run whose probes give exactly ``acquired`` right after injection and ``retained``
    at the end (both splits), plus optional per-seed noise."""
    e = (lambda: rng.normal(0, noise)) if rng is not None else (lambda: 0.0)
    a, k = acquired + e(), retained + e()
    e0 = {"unseen": 5.0, "paraphrase": 5.2, "once": 4.9}

    def point(step, para, once):
        # u(t) - s(t) - (u0 - s0) = gain: the unseen loss moves too (continual training alone)
        u = 5.0 - 0.1 * step
        return {"step": step, "loss": 3.0, "unseen": u, "paraphrase": u - (e0["unseen"] - e0["paraphrase"]) - para,
                "once": u - (e0["unseen"] - e0["once"]) - once}

    curve = [point(2, 0.1, a), point(4, a, (a + k) / 2), point(6, k, k)]
    return {"label": f"s{seed}_{arm}_{fraction}_{q}", "seed": seed, "step": 100, "fraction": fraction, "arm": arm,
            "ratio": None if arm == "plain" else 0.5, "q": None if arm == "plain" else q, "roles": list(roles),
            "h_start": 9.0, "h_resuscitated": 9.5 if arm != "plain" else None, "h_final": h_final, "eval0": e0,
            "curve": curve}


def metrics(effects, seeds=5, noise=0.02, rising=False):
    rng = np.random.default_rng(0)
    runs = []
    for s in range(seeds):
        for (arm, fraction, roles, q), (acq, ret, h) in effects.items():
            runs.append(run(s, arm, fraction, acq, ret, roles, q, h + rng.normal(0, 0.01), rng, noise))
    sign = 1 if rising else -1
    curves = [{"seed": s, "points": [{"step": t, "h": 10 + sign * 0.1 * t + rng.normal(0, 0.01), "h_max": 11.0,
                                      "layers": [1.0]} for t in range(6)]} for s in range(seeds)]
    return {"runs": runs, "curves": curves, "schedule": SCHEDULE, "seeds": list(range(seeds)), "models": []}


EARLY, LATE = ("plain", 0.1, ("main",), None), ("plain", 1.0, ("main",), None)
RESUS, RANDOM, Q1 = ("resus", 1.0, ("main", "grid"), 2.0), ("random", 1.0, ("main",), 2.0), ("resus", 1.0, ("q1",), 1.0)
PAPER = {EARLY: (0.6, 0.45, 9.5), LATE: (0.3, 0.05, 9.0), RESUS: (0.45, 0.3, 9.4), RANDOM: (0.3, 0.1, 8.5),
         Q1: (0.35, 0.2, 9.2)}


def verdicts(m):
    return {c.id: c.holds for c in analysis.claims(m, None)}


def test_gains_read_acquisition_after_each_splits_last_injection_and_retention_at_the_end():
    r = run(0, "plain", 1.0, 0.4, 0.1)
    g = analysis.gains(r, SCHEDULE)
    # paraphrase acquires at step 4 (last round), once at step 2 (its only round); both keep 0.1
    assert g["acquired_paraphrase"] == pytest.approx(0.4) and g["acquired_once"] == pytest.approx(0.4)
    assert g["retained"] == pytest.approx(0.1) and g["forgetting"] == pytest.approx(0.3)  # nats/token lost again
    # nothing acquired: forgetting is still defined (a seed is never dropped for it)
    assert analysis.gains(run(0, "plain", 1.0, -0.1, 0.0), SCHEDULE)["forgetting"] == pytest.approx(-0.1)


def test_the_papers_pattern_holds():
    v = verdicts(metrics(PAPER))
    assert v == {"entropy_decays": True, "acquisition_decreases": True, "forgetting_increases": True,
                 "resuscitation_acquires_more": True, "resuscitation_retains_more": True,
                 "resuscitation_beats_random": True, "resuscitation_keeps_entropy": True,
                 "resuscitation_raises_entropy": True}


def test_no_effect_is_not_read_as_one():
    same = {k: (0.3, 0.1, 9.0) for k in PAPER}
    v = verdicts(metrics(same))
    for claim in ("acquisition_decreases", "forgetting_increases", "resuscitation_acquires_more",
                  "resuscitation_retains_more", "resuscitation_beats_random"):
        assert v[claim] is not True, claim


def test_reversed_effects_fail():
    rev = dict(PAPER)
    rev[EARLY], rev[LATE] = PAPER[LATE], PAPER[EARLY]
    rev[RESUS] = (0.2, 0.05, 8.0)
    m = metrics(rev, rising=True)
    for r in m["runs"]:  # resuscitation that lowers H at once (q > 1 overshooting an even layer)
        if r["arm"] == "resus":
            r["h_resuscitated"] = r["h_start"] - 0.1 - 0.01 * r["seed"]
    v = verdicts(m)
    assert v["resuscitation_raises_entropy"] is False
    assert v["entropy_decays"] is False
    assert v["acquisition_decreases"] is False and v["resuscitation_acquires_more"] is False
    assert v["resuscitation_retains_more"] is False and v["resuscitation_keeps_entropy"] is False


def test_random_neurons_as_good_as_resuscitation_fail_the_control():
    ctrl = dict(PAPER)
    ctrl[RANDOM] = PAPER[RESUS]
    assert verdicts(metrics(ctrl))["resuscitation_beats_random"] is not True


def test_one_seed_is_inconclusive_and_report_and_plots_render():
    m = metrics(PAPER, seeds=1)
    v = verdicts(m)
    assert all(v[k] is None for k in v)
    md = analysis.report_md(metrics(PAPER), None)
    assert "## Resuscitation grid" in md and "| q=1 |" in md
    from iclr_ray.studies.knowledge_entropy import plots

    figs = plots.plot_all(metrics(PAPER), None)
    assert set(figs) == {"entropy_curve", "entropy_layers", "acquisition_retention", "probe_curves",
                         "resuscitation_grid", "entropy_vs_acquisition"}


def _with_losses(m, losses):
    """Start checkpoints at steps 10, 50, 100 (fractions 0.1, 0.5, 1.0) and pretraining curves whose
    loss at those steps is ``losses``."""
    step = {0.1: 10, 0.5: 50, 1.0: 100}
    for r in m["runs"]:
        r["step"] = step[r["fraction"]]
    for c in m["curves"]:  # logged every step, flat between the start checkpoints
        c["pretrain_loss"] = [{"step": s, "loss": losses[min(f for f, at in step.items() if at >= s)]}
                              for s in range(1, 101)]
    return m


def test_the_matched_loss_comparison_reads_the_earliest_start_near_the_last_ones_loss():
    mid = ("plain", 0.5, ("main",), None)
    # the mid checkpoint is within 10% of the last one's loss, the early one far above it
    clear = _with_losses(metrics({**PAPER, mid: (0.5, 0.4, 9.3)}), {0.1: 5.4, 0.5: 3.6, 1.0: 3.4})
    assert analysis.matched_start(clear)[0] == "start=0.5"
    v = verdicts(clear)
    assert v["acquisition_decreases_matched_loss"] is True and v["forgetting_increases_matched_loss"] is True
    claim = next(c for c in analysis.claims(clear, None) if c.id == "acquisition_decreases_matched_loss")
    assert claim.measured == pytest.approx(0.2, abs=0.03) and "3.6 against 3.4" in claim.note
    # negative control: at matched loss the later checkpoint acquires and forgets as much
    same = _with_losses(metrics({**PAPER, mid: PAPER[LATE]}), {0.1: 5.4, 0.5: 3.6, 1.0: 3.4})
    v = verdicts(same)
    assert v["acquisition_decreases_matched_loss"] is not True and v["forgetting_increases_matched_loss"] is not True
    # no start within 10%: no matched-loss claims, and the report says why
    far = _with_losses(metrics({**PAPER, mid: (0.5, 0.4, 9.3)}), {0.1: 5.4, 0.5: 4.2, 1.0: 3.4})
    assert analysis.matched_start(far)[0] is None and "acquisition_decreases_matched_loss" not in verdicts(far)
    assert "no matched-loss comparison" in analysis.report_md(far, None)
