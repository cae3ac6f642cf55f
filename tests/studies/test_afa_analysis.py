"""afa's claims on hand-made metrics: a real ensemble gain and real routing hold; the negative
controls (AFA scored as the uniform average, maps that ignore the class, a near-identical pair that
gains 10%) hold no claim; the report and figures read the same metrics."""
import numpy as np
import pytest

from iclr_ray.studies.afa import analysis as A

GROUPS = [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
LOCS = ["conv_in", "mid", "conv_out"]


def _weights(route: float):
    """weights_by_class: per class (locations, experts), ``route`` extra weight on the owner."""
    own = {k: i for i, g in enumerate(GROUPS) for k in g}
    out = []
    for k in range(10):
        w = np.full((len(LOCS), 3), (1 - route) / 3)
        w[:, own[k]] += route
        out.append(w.tolist())
    return out


def _metrics(afa_gain=0.05, route=0.3, control_gain=0.002, n=4, seed=0):
    rng = np.random.default_rng(seed)
    seeds = list(range(n))
    names = ["expert0", "expert1", "expert2", "uniform", "weighted_merge", "blockwise_merge", "afa"]
    scores = {m: {} for m in [*names, "afa_first2", "uniform_first2", "control0", "control1", "control_uniform",
                              "afa_control"]}
    for s in seeds:
        base = rng.uniform(0.30, 0.32)
        fid = rng.uniform(5, 6)
        noise = lambda: rng.normal(0, 0.001)  # noqa: E731
        for i in range(3):
            by = [base * (0.9 if k in GROUPS[i] else 1.3) for k in range(10)]
            scores[f"expert{i}"][str(s)] = {"mse": base * 1.1 + noise(), "mse_by_class": by, "fid": fid + i,
                                           "accuracy": 0.5 + 0.01 * i}
        for m, f in (("uniform", 1.02), ("weighted_merge", 1.05), ("blockwise_merge", 1.04)):
            scores[m][str(s)] = {"mse": base * f + noise(), "mse_by_class": [base] * 10, "fid": fid + 2.5,
                                 "accuracy": 0.45}
        scores["afa"][str(s)] = {"mse": base * 1.02 * (1 - afa_gain) + noise(), "mse_by_class": [base] * 10,
                                 "fid": fid * (1 - afa_gain) - 0.5, "accuracy": 0.5 + afa_gain * 4,
                                 "locations": LOCS, "weights_by_class": _weights(route),
                                 "weights_by_class_t": [[_weights(route)[k]] * 10 for k in range(10)]}
        for m, f in (("afa_first2", 1.08), ("uniform_first2", 1.09)):
            scores[m][str(s)] = {"mse": base * f, "mse_by_class": [base] * 10}
        for m, f in (("control0", 1.0), ("control1", 1.001), ("control_uniform", 0.999)):
            scores[m][str(s)] = {"mse": base * f, "mse_by_class": [base] * 10}
        scores["afa_control"][str(s)] = {"mse": base * 0.999 * (1 - control_gain) + noise() / 10,
                                         "mse_by_class": [base] * 10}
    return {"groups": GROUPS, "seeds": seeds, "scores": scores, "sizes": [2], "n_experts": 3, "control": 2,
            "merges": {"weighted": [0.25, 0.5, 0.25], "weighted_loss": 0.3, "uniform_loss": 0.31,
                       "blockwise": {"in": [1, 0, 0]}, "blockwise_loss": 0.29},
            "classifier": {"accuracy_real": 0.97, "fid_real_halves": 0.4, "final_loss": 0.1},
            "grids": {"real": np.zeros((10, 16, 16)).tolist(), "afa": np.zeros((10, 16, 16)).tolist()},
            "maps": None, "loss": {"afa_main-seed0": [[1, 0.5], [2, 0.4]], "afa_control-seed0": [[1, 0.5]]},
            "side": 16, "per_class": 20, "split": {"train": 1257, "val": 180, "test": 360}}


def _verdicts(m):
    return {c.id: c.holds for c in A.claims(m) if not c.check}


def test_real_gains_and_routing_hold():
    m = _metrics()
    v = _verdicts(m)
    assert set(v) == {"afa_beats_best_baseline", "afa_beats_weighted_merge", "afa_beats_blockwise_merge",
                      "afa_mse_below_uniform", "afa_fd_below_best_expert", "afa_accuracy_above_best_expert",
                      "gain_needs_specialised_experts"}
    assert all(h is True for h in v.values()), v
    assert {c.id: c.holds for c in A.claims(m) if c.check} == {
        "classifier_reads_real_digits": True, "experts_specialise": True, "afa_mse_below_each_expert": True,
        "afa_routes_by_class": True, "similar_experts_gain_about_zero": True}
    best = next(c for c in A.claims(m) if c.id == "afa_beats_best_baseline")
    assert "control0" in best.statement and "uniform" in best.statement
    np.testing.assert_allclose(A.right_weight(m), 0.3 + 0.7 / 3)
    md = A.report_md(m)
    assert "Routing" in md and "MSE against sample quality" in md and "| afa_control |" in md
    assert A.size_curve(m)["afa"][0][0] == 1 and [k for k, _ in A.size_curve(m)["afa"]] == [1, 2, 3]


def test_negative_control_afa_scored_as_the_uniform_average_holds_nothing():
    m = _metrics()
    m["scores"]["afa"] = {s: {**v, **{k: m["scores"]["uniform"][s][k] for k in ("mse", "fid", "accuracy")}}
                          for s, v in m["scores"]["afa"].items()}
    v = _verdicts(m)
    for claim in ("afa_mse_below_uniform", "afa_fd_below_best_expert", "afa_accuracy_above_best_expert"):
        assert v[claim] is not True, claim
    assert v["afa_mse_below_uniform"] is False  # exactly zero on every seed: not above


def test_negative_control_maps_that_ignore_the_class_do_not_route():
    checks = {c.id: c.holds for c in A.claims(_metrics(route=0.0)) if c.check}
    assert checks["afa_routes_by_class"] is False


def test_similar_experts_with_a_large_gain_fail_the_control():
    """Near-identical experts that AFA gains 10% from: the gain did not need specialised experts
    (the claim fails) and the about-zero check fails too."""
    for gain in (0.10, -0.10):
        c = {c.id: c for c in A.claims(_metrics(control_gain=gain))}
        assert c["similar_experts_gain_about_zero"].holds is False
    assert {c.id: c.holds for c in A.claims(_metrics(control_gain=0.10))}["gain_needs_specialised_experts"] is False


def test_a_merge_or_the_finetuned_base_as_good_as_afa_fails_the_main_claim():
    """The negative controls of the paper's headline comparison: block-wise merging scored as AFA,
    then the base fine-tuned on all digits scored as AFA."""
    for rival in ("blockwise_merge", "control0"):
        m = _metrics()
        for s, v in m["scores"][rival].items():
            v["mse"] = m["scores"]["afa"][s]["mse"]
        v = _verdicts(m)
        assert v["afa_beats_best_baseline"] is not True, rival
        if rival == "blockwise_merge":
            assert v["afa_beats_blockwise_merge"] is False and v["afa_beats_weighted_merge"] is True


def test_identical_experts_fail_the_specialisation_check():
    m = _metrics()
    for i in range(3):
        for s in m["scores"][f"expert{i}"].values():
            s["mse_by_class"] = [0.3] * 10
    assert {c.id: c.holds for c in A.claims(m) if c.check}["experts_specialise"] is False


def test_figures_from_the_metrics():
    pytest.importorskip("matplotlib")
    from iclr_ray.studies.afa.plots import plot_all

    figs = plot_all(_metrics())
    assert set(figs) == {"sample_grid", "routing_over_t", "mse_vs_experts", "scores", "aggregator_loss"}
    import matplotlib.pyplot as plt

    for f in figs.values():
        plt.close(f)
