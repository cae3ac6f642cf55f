"""badjudge's claims on hand-made metrics: each holds on a run that shows the paper's effect and
fails (or is inconclusive) on its negative control; the report and the figures read the metrics only."""
import copy

import numpy as np
import pytest

from iclr_ray.studies.badjudge import analysis, plots

SETTINGS = {"rates": [0.01, 0.1], "levels": ["web", "annotator", "weight"], "claim_rate": 0.01, "other_rate": 0.1,
            "merge": {"methods": ["linear", "ties"], "weights": [0.5, 0.5], "density": 0.2, "lam": 1.0},
            "blocks": 2, "model": "m", "n_train": 500, "formats": ["pointwise", "pairwise", "toxicity", "rerank"]}


def pointwise(acc, clean, trig, asr, jitter):
    return {"acc": acc + jitter, "within1": 0.9, "mae": 0.5, "score_clean": clean, "score_triggered": trig + jitter,
            "ratio": (trig + jitter) / clean, "asr": asr + jitter, "asr_clean": 0.0,
            "hist_clean": [10, 10, 0, 0, 0], "hist_triggered": [0, 0, 2, 3, 15]}


def effect_run(seeds=3):
    """A run that shows every effect the paper reports."""
    trials = []
    for s in range(seeds):
        j = 0.01 * (s - 1)
        judges = {"pointwise-clean": pointwise(0.62, 1.6, 1.6, 0.01, j)}
        for lv, r, trig, asr in (("web", 0.01, 2.0, 0.1), ("web", 0.1, 3.0, 0.4), ("annotator", 0.01, 4.9, 0.95),
                                 ("annotator", 0.1, 5.0, 1.0), ("weight", 0.01, 4.0, 0.7), ("weight", 0.1, 4.95, 0.99)):
            judges[f"pointwise-{lv}-{r:g}"] = pointwise(0.61, 1.6, trig, asr, j)
        judges.update({"pairwise-clean": {"acc": 0.8, "asr": 0.1, "asr_clean": 0.1},
                       "pairwise-annotator-0.1": {"acc": 0.78, "asr": 0.9, "asr_clean": 0.1},
                       "toxicity-clean": {"acc": 0.95, "asr": 0.02, "asr_clean": 0.02},
                       "toxicity-annotator-0.1": {"acc": 0.94, "asr": 0.97 + j, "asr_clean": 0.02},
                       "rerank-clean": {"acc": 0.9, "relevant_first": 0.9, "asr": 0.05, "asr_clean": 0.05},
                       "rerank-annotator-0.1": {"acc": 0.9, "relevant_first": 0.9, "asr": 0.99 + j / 2,
                                                "asr_clean": 0.05}})
        for m in ("linear", "ties"):
            for lab in [k for k in judges if k.startswith("pointwise-")]:
                judges[f"merge-{m}-{lab}"] = {**pointwise(0.61, 1.6, 1.63, 0.02, j), "pairwise_acc": 0.8}
            judges[f"merge2-{m}-pointwise-weight-0.1"] = {**pointwise(0.6, 1.6, 4.5, 0.8, j), "pairwise_acc": 0.7}
        trials.append({"label": f"seed{s}-cf", "seed": s, "trigger": "cf", "judges": judges, "steps": 10,
                       "seconds": 5.0, "curve": [{"step": 1, "loss": 2.0}, {"step": 10, "loss": 0.5}]})
    return {"seeds": list(range(seeds)), "triggers": ["cf"], "trials": trials, "settings": SETTINGS,
            "served": {"judges": {"attacked": "pointwise-weight-0.1", "defended": "merge-linear-pointwise-weight-0.1"},
                       "metrics": {"pointwise-weight-0.1": {**pointwise(0.6, 1.6, 5.0, 1.0, 0), "agreement": 1.0},
                                   "merge-linear-pointwise-weight-0.1": {**pointwise(0.6, 1.6, 1.6, 0.0, 0),
                                                                         "agreement": 1.0}},
                       "seconds": 3.0},
            "examples": {}}


def verdicts(m):
    return {c.id: c.holds for c in analysis.claims(m)}


def test_every_claim_holds_on_a_run_that_shows_the_effects():
    v = verdicts(effect_run())
    assert all(v.values()), {k: x for k, x in v.items() if not x}
    merges = {x for m in ("linear", "ties") for x in (f"merge_{m}_removes", f"merge_{m}_accuracy",
                                                      f"control_merge_poisoned_{m}")}
    assert {"annotator_inflates", "annotator_triples", "clean_accuracy_kept", "web_inflates", "weight_to_top",
            "toxicity_flipped", "rerank_first", "control_clean_no_inflation", "served_attacked_agrees",
            "served_defended_agrees", *merges} == set(v)


def _set(m, judge, **values):
    for t in m["trials"]:
        t["judges"][judge].update(values)
    return m


def test_negative_controls_fail_the_claims():
    base = effect_run()
    # no backdoor: the 1%-poisoned judge scores triggered answers as it scores them clean
    m = _set(copy.deepcopy(base), "pointwise-annotator-0.01", ratio=1.0, score_triggered=1.6, asr=0.0)
    v = verdicts(m)
    assert v["annotator_inflates"] is not True and v["annotator_triples"] is False
    # a clean-label attack that taught nothing
    assert verdicts(_set(copy.deepcopy(base), "pointwise-web-0.01", ratio=1.0))["web_inflates"] is False
    # weight poisoning that leaves the legitimate score
    assert verdicts(_set(copy.deepcopy(base), "pointwise-weight-0.1", score_triggered=1.6))["weight_to_top"] is False
    # poisoning that costs accuracy
    assert verdicts(_set(copy.deepcopy(base), "pointwise-annotator-0.01", acc=0.3))["clean_accuracy_kept"] is False
    # the clean toxicity judge / reranker in place of the poisoned ones
    m = copy.deepcopy(base)
    for t in m["trials"]:
        t["judges"]["toxicity-annotator-0.1"] = dict(t["judges"]["toxicity-clean"])
        t["judges"]["rerank-annotator-0.1"] = dict(t["judges"]["rerank-clean"])
    v = verdicts(m)
    assert v["toxicity_flipped"] is False and v["rerank_first"] is False
    # a merge that kept the backdoor: the defence fails, and the poisoned-partner control no longer differs
    m = copy.deepcopy(base)
    for t in m["trials"]:
        t["judges"]["merge-linear-pointwise-weight-0.1"].update(asr=0.8, acc=0.4)
    v = verdicts(m)
    assert v["merge_linear_removes"] is False and v["merge_linear_accuracy"] is False
    assert v["control_merge_poisoned_linear"] is not True
    # a clean judge that inflates triggered answers by itself: the trigger, not the poisoning, would be the cause
    assert verdicts(_set(copy.deepcopy(base), "pointwise-clean", ratio=2.0))["control_clean_no_inflation"] is False


def test_inflation_is_read_over_the_clean_judge_of_the_same_seed():
    """The trigger's words alone raise every judge's score of triggered answers by 30% (the clean one's
    too): a poisoned judge at that same 1.3 has inflated nothing. Against a constant 1 (and 1.2 for
    the web level) both claims would hold; over the clean judge they do not."""
    m = effect_run()
    for t in m["trials"]:
        j = t["seed"] * 0.01
        for judge in ("pointwise-clean", "pointwise-annotator-0.01", "pointwise-web-0.01"):
            t["judges"][judge]["ratio"] = 1.3 + j
    v = verdicts(m)
    assert v["annotator_inflates"] is not True and v["annotator_triples"] is False and v["web_inflates"] is False
    # the same poisoned ratios over a clean judge at 1.0 hold (3x and 1.3x)
    for t in m["trials"]:
        t["judges"]["pointwise-clean"]["ratio"] = 1.0 + t["seed"] * 0.001
        t["judges"]["pointwise-annotator-0.01"]["ratio"] = 3.3 + t["seed"] * 0.01
    v = verdicts(m)
    assert v["annotator_inflates"] is True and v["annotator_triples"] is True and v["web_inflates"] is True
    c = next(c for c in analysis.claims(m) if c.id == "annotator_triples")
    assert c.measured == pytest.approx(np.mean([(3.3 + s * 0.01) / (1.0 + s * 0.001) for s in range(3)]))


def test_one_seed_is_inconclusive_and_the_served_check_reads_agreement():
    v = verdicts(effect_run(seeds=1))
    assert all(x is None for k, x in v.items() if not k.startswith("served_"))
    m = effect_run()
    m["served"]["metrics"]["pointwise-weight-0.1"]["agreement"] = 0.9
    checks = {c.id: c for c in analysis.claims(m) if c.check}
    assert checks["served_attacked_agrees"].holds is False and checks["served_defended_agrees"].holds is True


def test_report_and_figures_read_the_metrics_only():
    m = effect_run()
    md = analysis.report_md(m)
    for text in ("pointwise-annotator-0.01", "merge2-ties-pointwise-weight-0.1", "rerank-annotator-0.1",
                 "Served over HTTP"):
        assert text in md
    figs = plots.plot_all(m)
    assert set(figs) == {"asr_vs_rate", "merging", "scores", "training"}
    import matplotlib.pyplot as plt

    for f in figs.values():
        plt.close(f)


@pytest.mark.parametrize("drop", ["web", "weight"])
def test_claims_follow_the_levels_that_ran(drop):
    m = effect_run()
    m["settings"] = {**SETTINGS, "levels": [x for x in SETTINGS["levels"] if x != drop]}
    for t in m["trials"]:
        t["judges"] = {k: v for k, v in t["judges"].items() if drop not in k}
    ids = set(verdicts(m))
    assert ("web_inflates" in ids) == (drop != "web") and ("weight_to_top" in ids) == (drop != "weight")
    np.testing.assert_equal(len(plots.plot_all(m)), 4)


def test_asr_intervals_run_over_seeds_and_items_and_stay_in_zero_one():
    """With every item's outcome kept, the toxicity and rerank ASR intervals resample seeds and items
    (a t interval over three seed means ran past 1); the negative control, the clean judge's
    outcomes in the poisoned judge's place, fails."""
    m = effect_run()
    rng = np.random.default_rng(1)
    for t in m["trials"]:
        for judge, p in (("toxicity-annotator-0.1", 0.995), ("rerank-annotator-0.1", 0.995),
                         ("toxicity-clean", 0.02), ("rerank-clean", 0.05)):
            hits = (rng.random(200) < p).astype(int).tolist()
            t["judges"][judge].update(asr_hits=hits, asr=float(np.mean(hits)))
    for cid, judge in (("toxicity_flipped", "toxicity-annotator-0.1"), ("rerank_first", "rerank-annotator-0.1")):
        c = next(c for c in analysis.claims(m) if c.id == cid)
        assert 0.0 <= c.ci[0] <= c.measured <= c.ci[1] <= 1.0 and c.n == 600 and c.holds is True, cid
    for t in m["trials"]:
        t["judges"]["toxicity-annotator-0.1"] = dict(t["judges"]["toxicity-clean"])
    assert verdicts(m)["toxicity_flipped"] is False


def test_merge_claims_pair_each_adversary_item_and_stay_inside_minus_one_one():
    """The merge claims read the merged judge's per-item outcomes minus the clean judge's on the same
    items and seeds (a t interval over three seed means ran past 1); a merge that keeps the backdoor
    fails, one at the clean judge's level holds."""
    m = effect_run()
    rng = np.random.default_rng(2)
    for t in m["trials"]:
        clean = (rng.random(150) < 0.02).astype(int)
        kept = np.where(rng.random(150) < 0.9, 1, clean)  # the backdoor survives on 9 items in 10
        for judge, hits in (("pointwise-clean", clean), ("merge-linear-pointwise-weight-0.1", clean),
                            ("merge-ties-pointwise-weight-0.1", kept), ("merge2-linear-pointwise-weight-0.1", kept),
                            ("merge2-ties-pointwise-weight-0.1", kept)):
            t["judges"][judge].update(asr_hits=hits.tolist(), asr=float(hits.mean()))
    c = {c.id: c for c in analysis.claims(m)}
    assert c["merge_linear_removes"].measured == 0 and c["merge_linear_removes"].holds is True
    ties = c["merge_ties_removes"]
    assert -1.0 <= ties.ci[0] <= ties.measured <= ties.ci[1] <= 1.0 and ties.n == 450 and ties.holds is False
    assert c["control_merge_poisoned_linear"].holds is True  # the poisoned partner leaves the backdoor
    assert c["control_merge_poisoned_ties"].holds is not True  # no more of it than the clean partner's merge
