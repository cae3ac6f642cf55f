"""igcg's claims on hand-made runs: each holds where the effect is there, and its negative control
(no effect, the random control in the method's place, a start that saves nothing) makes it fail or
stay inconclusive; censoring at the budget; the report and the figures."""
import numpy as np
import pytest

from iclr_ray.studies.igcg import analysis, plots

BUDGET = 100
TARGETS, SEEDS = 4, 3


def run(target, method, K, seed, success, init="default", per_step=1.0, wall_per_step=None):
    n = (success if success is not None else BUDGET) + 1
    return {"target": target, "method": method, "K": K, "seed": seed, "init": init, "success_step": success,
            "loss": list(np.linspace(3.0, 0.4, n)), "exact": [False] * (n - 1) + [success is not None],
            "changed": [0] + [1] * (n - 1), "candidates": [1] + [32] * (n - 1),
            "seconds": list(np.arange(n) * (per_step if wall_per_step is None else wall_per_step)),
            "cpu_seconds": list(np.arange(n) * per_step), "init_suffix": "! ! ! ! ! !", "suffix": "x", "suffix_ids": [1],
            "generates": success is not None}


def metrics(steps, e2h=None, ks=(1, 3, 7), K=7):
    """``steps[(method, K)](target, seed)`` -> success step or None, for every target and seed."""
    runs = [run(t, m, k, s, f(t, s)) for (m, k), f in steps.items() for t in range(TARGETS) for s in range(SEEDS)]
    if e2h:
        runs += [run(t, "igcg", K, s, e2h(t, s), init="easy") for t in range(1, TARGETS) for s in range(SEEDS)]
    return {"model": "m", "targets": [{"message": f"q{t}", "target": f"a{t}"} for t in range(TARGETS)], "easy": 0,
            "ks": list(ks), "compared_ks": list(ks), "K": K, "budget": BUDGET, "criterion": "exact", "runs": runs}


def jitter(base):
    return lambda t, s: base + 3 * t + s


def by_id(m):
    return {c.id: c for c in analysis.claims(m)}


def test_multi_coordinate_speedups_hold_when_igcg_needs_fewer_steps():
    fast = lambda t, s: 2 + (t + s) % 2  # noqa: E731
    m = metrics({("gcg", 1): jitter(60), ("igcg", 3): jitter(25), ("igcg", 7): fast,
                 ("random", 7): lambda t, s: None}, e2h=lambda t, s: (t + s) % 2)
    c = by_id(m)
    assert c["fewer_steps_K3"].holds is True and c["fewer_steps_K7"].holds is True
    assert c["less_time_K7"].holds is True
    assert c["fewer_steps_K7"].measured == pytest.approx(np.mean([60 + 3 * t + s for t in range(4) for s in range(3)])
                                                         / np.mean([fast(t, s) for t in range(4) for s in range(3)]))
    assert c["tenfold_K7"].holds is True
    assert c["gradient_guided"].holds is True
    assert c["easy_to_hard"].holds is True
    assert c["success_rate_K7"].holds is None  # 12 of 12: the Wilson interval still reaches below 0.95


def test_time_is_the_processes_cpu_time_not_the_wall_time_of_shared_cores():
    """I-GCG's runs take fewer steps but each costs 3x the CPU; their wall time looks short (as when
    GCG's tasks shared the cores with more others): the time claim reads CPU time and fails."""
    steps = {("gcg", 1): jitter(60), ("igcg", 3): jitter(30), ("igcg", 7): jitter(30)}
    runs = [run(t, m, k, s, f(t, s), per_step=1.0 if m == "gcg" else 3.0, wall_per_step=1.0 if m != "gcg" else 4.0)
            for (m, k), f in steps.items() for t in range(TARGETS) for s in range(SEEDS)]
    m = {**metrics(steps), "runs": runs}
    c = by_id(m)
    assert c["fewer_steps_K7"].holds is True and c["less_time_K7"].holds is False
    assert c["less_time_K7"].measured == pytest.approx(np.mean([60 + 3 * t + s for t in range(4) for s in range(3)])
                                                       / (3 * np.mean([30 + 3 * t + s for t in range(4) for s in range(3)])))


def test_negative_control_no_speedup_fails_or_is_inconclusive():
    same = jitter(40)
    m = metrics({("gcg", 1): same, ("igcg", 3): same, ("igcg", 7): same, ("random", 7): same}, e2h=same)
    c = by_id(m)
    for cid in ("fewer_steps_K3", "fewer_steps_K7", "less_time_K7", "gradient_guided", "easy_to_hard", "tenfold_K7"):
        assert c[cid].holds is not True, cid
    assert c["tenfold_K7"].holds is False


def test_negative_control_random_candidates_in_place_of_igcg():
    # the random control's runs as the K=7 method: never succeeding, they are slower than GCG
    m = metrics({("gcg", 1): jitter(40), ("igcg", 3): lambda t, s: None, ("igcg", 7): lambda t, s: None,
                 ("random", 7): lambda t, s: None})
    c = by_id(m)
    assert c["fewer_steps_K7"].holds is False and c["fewer_steps_K3"].holds is False
    assert c["gradient_guided"].holds is False  # both censored at the budget: a ratio of exactly 1
    assert c["success_rate_K7"].holds is False


def test_censoring_counts_the_whole_budget_and_can_only_shrink_a_speedup():
    r = run(0, "gcg", 1, 0, None, per_step=0.5)
    assert analysis.steps_to_success(r, BUDGET) == BUDGET
    assert analysis.seconds_to_success(r) == pytest.approx(BUDGET * 0.5)
    ok = run(0, "gcg", 1, 0, 30, per_step=0.5)
    assert analysis.steps_to_success(ok, BUDGET) == 30 and analysis.seconds_to_success(ok) == pytest.approx(15)
    # GCG censored at 100 although it would need more: the measured speed-up is a lower bound
    m = metrics({("gcg", 1): lambda t, s: None, ("igcg", 3): jitter(30), ("igcg", 7): jitter(10)})
    assert by_id(m)["fewer_steps_K7"].measured == pytest.approx(BUDGET / np.mean([10 + 3 * t + s for t in range(4)
                                                                                  for s in range(3)]))


def test_easy_to_hard_pairs_the_same_targets_and_seeds():
    # the easy target (0) has no easy-to-hard run; the saving is measured on targets 1..3 only
    m = metrics({("gcg", 1): jitter(60), ("igcg", 3): jitter(30), ("igcg", 7): lambda t, s: 50 if t == 0 else 20},
                e2h=lambda t, s: 20 + (s - 1))
    c = by_id(m)["easy_to_hard"]
    assert c.n == 9 and c.measured == pytest.approx(0.0) and c.holds is None


def test_report_and_figures_read_the_metrics_only():
    m = metrics({("gcg", 1): jitter(60), ("igcg", 3): jitter(25), ("igcg", 7): jitter(4),
                 ("random", 7): lambda t, s: None}, e2h=jitter(1))
    md = analysis.report_md(m)
    assert "I-GCG K=7, easy-to-hard" in md and "random K=7 (control)" in md and "12/12" in md and "0/12" in md
    figs = plots.plot_all(m)
    assert set(figs) == {"loss", "steps_to_success"}
    ax = figs["steps_to_success"].axes[0]
    final = {line.get_label(): line.get_ydata()[-1] for line in ax.get_lines()}
    assert final["GCG (K=1)"] == 1.0 and final["random K=7 (control)"] == 0.0
