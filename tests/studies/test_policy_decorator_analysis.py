"""policy_decorator's claims from a metrics dict: each on its negative control (the base in place of
the decorator, a no-effect simulation, RL from scratch in place of the decorator) comes out False
or inconclusive, each on a real effect comes out True; the collapse claims' simultaneous interval
keeps its coverage where the old rule (the lowest of T points against one base estimate) flipped;
the report and figures read the metrics only."""
import math

import numpy as np
import pytest

from iclr_ray.config import DataError
from iclr_ray.results import decode_image, encode_image
from iclr_ray.studies.policy_decorator import analysis
from iclr_ray.studies.policy_decorator.config import Config

CFG = Config()  # eval.last = 3


def point(step, successes, jerks=None, residual_max=0.05):
    s = np.asarray(successes, int)
    j = np.full(len(s), 0.1) if jerks is None else np.asarray(jerks, float)
    return {"env_steps": step, "success": float(s.mean()), "jerk": float(j.mean()), "successes": s.tolist(),
            "jerks": j.tolist(), "residual_max": residual_max}


def metrics(base, dec=None, unb=None, rl=None, base_jerks=None):
    """base: (E,) successes; dec/unb/rl: (T, E) successes, or (successes, jerks) pairs of (T, E)."""
    def trial(variant, data, alpha, H):
        s, j = data if isinstance(data, tuple) else (data, None)
        return {"task": "t", "variant": variant, "alpha": alpha, "H": H,
                "curve": [point(1000 * i, row, None if j is None else j[i], residual_max=0.9 * alpha)
                          for i, row in enumerate(np.asarray(s))]}

    b = np.asarray(base, int)
    bj = np.full(len(b), 0.1) if base_jerks is None else base_jerks
    trials = [trial(v, d, a, H) for v, d, a, H in (("decorator", dec, 0.1, 5000), ("unbounded", unb, 1.0, 0),
                                                   ("rl_scratch", rl, 1.0, 0)) if d is not None]
    return {"tasks": {"t": {"base": {"success": float(b.mean()), "jerk": float(np.mean(bj)), "successes": b.tolist(),
                                     "jerks": list(bj)}}},
            "trials": trials}


def judged(m):
    return {c.id: c for c in analysis.claims(m, CFG)}


def no_effect(rng, E=100, T=11, p=None):
    """A stochastic base and a variant with no effect: every evaluation redraws each episode's
    success with that episode's own probability (the worst case for noise: nothing is paired)."""
    p = rng.beta(2, 2, E) if p is None else np.full(E, p)
    return (rng.random(E) < p).astype(int), (rng.random((T, E)) < p).astype(int)


def test_the_base_in_place_of_the_decorator_does_not_improve_or_collapse():
    rng = np.random.default_rng(0)
    base = (rng.random(100) < 0.5).astype(int)
    same = np.tile(base, (11, 1))
    got = judged(metrics(base, dec=same, unb=same))
    assert got["t_improves"].measured == 0 and got["t_improves"].ci == (0, 0) and got["t_improves"].holds is False
    assert got["t_no_early_collapse"].holds is True  # no effect is no collapse
    assert got["t_unbounded_collapses"].holds is False
    assert got["t_improves"].n == got["t_unbounded_collapses"].n == 100


def test_no_effect_simulations_do_not_flip_the_claims():
    rng = np.random.default_rng(1)
    verdicts = {"t_improves": [], "t_no_early_collapse": [], "t_unbounded_collapses": []}
    old_collapse = []
    for _ in range(300):
        base, dec = no_effect(rng)
        _, unb = no_effect(rng)
        got = judged(metrics(base, dec=dec, unb=unb))
        for k in verdicts:
            verdicts[k].append(got[k].holds)
        old_collapse.append(unb.mean(1).min() - base.mean() <= -analysis.COLLAPSE)  # the old rule
    assert np.mean([h is True for h in verdicts["t_improves"]]) <= 0.05
    assert np.mean([h is True for h in verdicts["t_unbounded_collapses"]]) <= 0.05
    assert np.mean([h is False for h in verdicts["t_no_early_collapse"]]) <= 0.05
    # the rule it replaces (the lowest of 11 evaluations against one base estimate) called a collapse
    # in most of these no-effect runs
    assert np.mean(old_collapse) > 0.3


def test_the_issue_s_setting_50_episodes_at_p_half():
    """11 evaluations of 50 episodes of a p = 0.5 policy with no effect: the old rule flipped the
    collapse claims about 2 times in 3; the simultaneous interval about 1 in 40 or less."""
    rng = np.random.default_rng(2)
    old, new = [], []
    for _ in range(300):
        base, unb = no_effect(rng, E=50, p=0.5)
        old.append(unb.mean(1).min() - base.mean() <= -analysis.COLLAPSE)
        new.append(judged(metrics(base, unb=unb))["t_unbounded_collapses"].holds is True)
    assert np.mean(old) > 0.5 and np.mean(new) <= 0.025


def test_real_effects_are_found():
    rng = np.random.default_rng(3)
    E = 200
    base = (rng.random(E) < 0.5).astype(int)
    # the decorator repairs 40% of the base's failures by the end; the unbounded residual breaks 50%
    # of its successes around 3k-5k steps, then recovers
    dec = np.array([np.where((base == 0) & (rng.random(E) < 0.4 * min(1, t / 6)), 1, base) for t in range(11)])
    unb = np.array([np.where((base == 1) & (rng.random(E) < (0.5 if 3 <= t <= 5 else 0.02)), 0, base)
                    for t in range(11)])
    got = judged(metrics(base, dec=dec, unb=unb))
    assert got["t_improves"].holds is True and got["t_improves"].ci[0] > 0.1
    assert got["t_no_early_collapse"].holds is True
    assert got["t_unbounded_collapses"].holds is True
    # the unbounded curve in place of the decorator: it collapsed, so no_early_collapse must not hold
    swapped = judged(metrics(base, dec=unb))
    assert swapped["t_no_early_collapse"].holds is False and swapped["t_improves"].holds is False


def test_the_lowest_gap_interval_covers_the_true_minimum():
    """Known per-evaluation gaps (a dip to -0.15 at one evaluation); the interval's coverage of the
    true min over evaluations is at least 95%."""
    rng = np.random.default_rng(4)
    E, T = 100, 8
    dips = np.zeros(T)
    dips[3] = -0.15
    hits = []
    for _ in range(400):
        p = rng.beta(2, 2, E)
        base = (rng.random(E) < p).astype(int)
        d = np.array([(rng.random(E) < np.clip(p + dip, 0, 1)).astype(int) for dip in dips])
        true_min = float(np.min([np.mean(np.clip(p + dip, 0, 1) - p) for dip in dips]))
        lo, hi = analysis.lowest_gap([point(0, r) for r in d], {"successes": base.tolist()}).ci
        hits.append(lo <= true_min <= hi)
    assert np.mean(hits) >= 0.95


def test_smoother_on_its_controls():
    rng = np.random.default_rng(5)
    E, T = 100, 4
    base = (rng.random(E) < 0.5).astype(int)
    succ = np.tile(base, (T, 1))

    def jerks(mean):
        return rng.gamma(4.0, mean / 4.0, (T, E))

    smooth = judged(metrics(base, dec=(succ, jerks(0.05)), rl=(succ, jerks(0.3))))["t_smoother"]
    assert smooth.holds is True and smooth.measured < 0.3 and smooth.n == E
    rougher = judged(metrics(base, dec=(succ, jerks(0.3)), rl=(succ, jerks(0.05))))["t_smoother"]
    assert rougher.holds is False
    # RL from scratch in place of the decorator (the same jerk distribution): never a smoothness claim
    same = [judged(metrics(base, dec=(succ, jerks(0.2)), rl=(succ, jerks(0.2))))["t_smoother"].holds
            for _ in range(100)]
    assert np.mean([h is True for h in same]) <= 0.05
    # RL from scratch whose actions never jerk (saturated): the ratio is undefined, inconclusive
    flat = judged(metrics(base, dec=(succ, jerks(0.2)), rl=(succ, np.zeros((T, E)))))["t_smoother"]
    assert flat.holds is None and math.isnan(flat.measured)


def test_smoothness_against_the_base_and_the_unbounded_residual_on_their_controls():
    """The comparisons that do not need RL from scratch to succeed: the decorator against its own
    base (at most 1.25x its jerk) and against the unbounded residual (at most 1x)."""
    rng = np.random.default_rng(7)
    E, T = 100, 4
    base = (rng.random(E) < 0.5).astype(int)
    succ = np.tile(base, (T, 1))

    def jerks(mean, shape=(T, E)):
        return rng.gamma(4.0, mean / 4.0, shape)

    c = judged(metrics(base, dec=(succ, jerks(0.1)), unb=(succ, jerks(0.4)), base_jerks=jerks(0.1, E)))
    assert c["t_keeps_base_smoothness"].holds is True and c["t_smoother_than_unbounded"].holds is True
    assert c["t_keeps_base_smoothness"].n == E
    # negative controls: a residual that doubles the base's jerk; an unbounded residual as smooth as
    # the decorator (the same jerk distribution: a smoothness claim at most 5% of the time)
    c = judged(metrics(base, dec=(succ, jerks(0.2)), unb=(succ, jerks(0.1)), base_jerks=jerks(0.1, E)))
    assert c["t_keeps_base_smoothness"].holds is False and c["t_smoother_than_unbounded"].holds is False
    same = [judged(metrics(base, dec=(succ, jerks(0.2)), unb=(succ, jerks(0.2))))["t_smoother_than_unbounded"].holds
            for _ in range(100)]
    assert np.mean([h is True for h in same]) <= 0.05
    # a base that never jerks: the ratio to it is undefined, inconclusive
    flat = judged(metrics(base, dec=(succ, jerks(0.2)), base_jerks=np.zeros(E)))["t_keeps_base_smoothness"]
    assert flat.holds is None and math.isnan(flat.measured)


def test_the_final_gain_averages_the_last_evaluations_per_episode():
    base = np.array([0, 0, 1, 1])
    dec = np.array([[0, 0, 0, 0], [1, 0, 1, 1], [1, 1, 1, 1], [1, 0, 1, 1]])  # last 3: 1, 1/3, 1, 1
    e = analysis.final_gain([point(0, r) for r in dec], {"successes": base.tolist()}, 3)
    assert np.isclose(e.value, (1 + 1 / 3 + 0 + 0) / 4) and e.n == 4


def test_the_residual_bound_is_a_check():
    m = metrics(np.array([0, 1, 1, 0]), dec=np.tile([0, 1, 1, 0], (2, 1)))
    checks = [c for c in analysis.claims(m, CFG) if c.check]
    assert [c.id for c in checks] == ["t_decorator_residual_bound"] and checks[0].holds is True
    m["trials"][0]["curve"][1]["residual_max"] = 0.1 + 1e-3  # an action beyond alpha = 0.1
    assert not [c for c in analysis.claims(m, CFG) if c.check][0].holds


def test_metrics_without_episodes_are_refused_with_one_line():
    m = metrics([0, 1, 1, 0], dec=[[0, 1, 1, 0]])
    del m["trials"][0]["curve"][0]["successes"]
    with pytest.raises(DataError, match="no per-episode evaluation records"):
        analysis.claims(m, CFG)


def _full(m):
    m["tasks"]["t"].update(demos={"episodes": 4, "successful": 3, "seeds": [0, 1, 2, 3]}, env_steps=1000)
    m["tasks"]["t"]["base"].update(kind="mlp", loss=[[1, 0.5], [2, 0.25]])
    return m


def test_an_expert_s_demonstrations_are_named_in_the_report_and_plotted():
    from iclr_ray.studies.policy_decorator import plots

    m = _full(metrics([0, 1, 1, 0], dec=[[0, 1, 1, 0], [1, 1, 1, 0]], unb=[[0, 1, 1, 0], [0, 0, 1, 0]]))
    report = analysis.report_md(m, CFG)
    assert "- t: 4 demonstrations (3 successful, seeds 0..3)" in report
    assert "| t | unbounded | 1000 | -0.25 |" in report  # paired per evaluation
    assert set(plots.plot_all(m, CFG)) == {"success_curves", "success_gap", "action_jerk"}
    m["tasks"]["t"]["demos"]["expert_curve"] = [{"env_steps": 640, "return": -40.0},
                                                {"env_steps": 1280, "return": -12.5}]
    assert ("- t: 4 demonstrations of an expert trained here (1280 env steps of SAC on the dense reward, mean dense "
            "return -12.50 at the end) (3 successful, seeds 0..3)") in analysis.report_md(m, CFG)
    fig = plots.plot_all(m, CFG)["expert_training"]
    line = fig.axes[0].get_lines()[0]
    assert list(line.get_xdata()) == [640, 1280] and list(line.get_ydata()) == [-40.0, -12.5]


def test_the_base_s_frames_travel_in_the_metrics_as_png_and_draw_as_they_were():
    from iclr_ray.studies.policy_decorator import plots

    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (24, 32, 3), dtype=np.uint8) for _ in range(3)]
    encoded = [encode_image(f) for f in frames]
    assert all(isinstance(e, str) for e in encoded) and all(np.array_equal(decode_image(e), f)
                                                            for e, f in zip(encoded, frames))
    m = _full(metrics([0, 1, 1, 0], dec=[[0, 1, 1, 0], [1, 1, 1, 0]]))
    m["tasks"]["t"]["frames"] = encoded
    strip = plots.plot_all(m, CFG)["frames_t"]
    shown = [ax.get_images()[0].get_array() for ax in strip.axes]
    assert len(shown) == 3 and all(np.array_equal(np.asarray(a), f) for a, f in zip(shown, frames))
