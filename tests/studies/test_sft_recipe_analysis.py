"""sft_recipe's claims on hand-made trials: each claim on the effect it states and on a negative
control (no effect, shuffled scores, the baseline in the method's place) that must come out
False or inconclusive; the checks; and the claims recomputed from result.json alone."""
import json

import numpy as np
import pytest

from iclr_ray.studies.sft_recipe.analysis import analyse, claims, item_table, outcomes, scores
from iclr_ray.studies.sft_recipe.config import Config

N = 120  # held-out items per half, as at small
CFG = Config()
TOL = CFG.tolerance


def items(right: int, start: int = 0) -> str:
    """N outcomes, ``right`` of them right, starting at item ``start`` (wrapping): two strings with
    the same count but different starts are equal scores on different items."""
    return "".join("1" if (i - start) % N < right else "0" for i in range(N))


def trial(label, *, experiments=("grid",), batch=32, lr=1e-3, schedule="constant", warmup=0, order="stacked",
          know=60, skills=60, start=0, norms=(1.0,), samples=3072):
    k, s = items(know, start), items(skills, start)
    curve = [{"samples": batch * i, "progress": batch * i / samples, "loss": 2.0, "grad_norm": g}
             for i, g in enumerate(norms, start=1)]
    return {"label": label, "experiments": list(experiments), "batch": batch, "lr": lr, "schedule": schedule,
            "warmup_steps": warmup, "order": order, "finished": True, "samples": samples, "curve": curve,
            "knowledge_mc": know / N, "knowledge_mc_items": k, "knowledge_em_items": items(0), "skills_em": skills / N,
            "skills_em_items": s, "knowledge_em": 0.0, "score": (know + skills) / (2 * N)}


def run_claims(trials, **extra):
    metrics = {"trials": trials, **extra}
    metrics.update(analyse(CFG, metrics))
    return {c.id: c for c in claims(metrics, CFG)}


def test_scores_from_the_items_are_the_trials_scores():
    ts = [trial("a", know=90, skills=30), trial("b", know=12, skills=100, start=7)]
    x, half = item_table(ts)
    assert x.shape == (2 * N, 2) and half.sum() == N
    assert scores(x, half) == pytest.approx([t["score"] for t in ts])
    # the knowledge half is the multiple-choice one where it was scored, else exact match
    em = dict(ts[0], knowledge_mc=None, knowledge_em=0.0)
    assert outcomes(em)[0][:N].sum() == 0
    with pytest.raises(ValueError, match="same held-out items"):
        item_table([ts[0], dict(ts[1], skills_em_items="1" * 10)])


def grid(large_right: int, start: int = 0) -> list[dict]:
    """batch 8 at two lrs (the better right on 60 + 60 items), batch 128 right on ``large_right`` per half."""
    return [trial("b8_lo", batch=8, lr=1e-3, know=40, skills=40), trial("b8_hi", batch=8, lr=3e-3),
            trial("b128", batch=128, lr=3e-3, know=large_right, skills=large_right, start=start)]


def test_large_batch_wins_needs_the_whole_interval_above_zero():
    assert run_claims(grid(90))["large_batch_wins"].holds is True
    c = run_claims(grid(30))["large_batch_wins"]
    assert c.holds is False and c.ci[1] < 0  # the smaller batch wins
    # negative controls: the same score on other items, and the very same answers (no effect at all;
    # the old point check at 0 passed both)
    c = run_claims(grid(60, start=60))["large_batch_wins"]
    assert c.measured == 0 and c.ci[0] < 0 < c.ci[1] and c.holds is None and c.n == 2 * N
    c = run_claims(grid(60))["large_batch_wins"]
    assert c.ci == (0.0, 0.0) and c.holds is False and c.bound == f">= {1 / 240:g}"


def predictive(scores_by_norm, seed=0):
    """12 grid trials whose early grad norms are 1..12 and whose scores (right items per half) are given."""
    return [trial(f"t{i}", batch=8, lr=1e-4 * (i + 1), know=int(s), skills=int(s), norms=(float(i + 1),) * 4)
            for i, s in enumerate(scores_by_norm)]


def test_spearman_claims_use_the_interval_over_trials():
    falling = predictive(np.linspace(110, 10, 12))  # lower early grad norm, better score
    by_id = run_claims(falling)
    g = by_id["early_grad_norm_predicts"]
    assert g.measured == pytest.approx(-1) and g.holds is True and g.n == 12
    # the early loss is the same for every trial: no rank correlation, inconclusive or failed, never held
    assert by_id["early_loss_predicts"].holds is not True
    # negative control: the scores shuffled across trials; every shuffle here leaves the interval across 0
    rng = np.random.default_rng(3)
    for _ in range(3):
        c = run_claims(predictive(rng.permutation(np.linspace(110, 10, 12))))["early_grad_norm_predicts"]
        assert c.holds is not True and c.ci[0] < 0 < c.ci[1], c
    # the opposite sign fails outright
    assert run_claims(predictive(np.linspace(10, 110, 12)))["early_grad_norm_predicts"].holds is False


def warmup_trials(gap: int, start: int = 0) -> list[dict]:
    return [trial(f"w{w}_{s}", experiments=("warmup",), warmup=w, schedule=s,
                  know=60 + (gap if w else 0), skills=60 + (gap if w else 0), start=start if w else 0)
            for w in (0, 25) for s in ("constant", "cosine")]


def test_warmup_and_schedule_claims_fail_on_a_real_difference():
    same = run_claims(warmup_trials(0))
    assert same["warmup_unneeded"].holds is True and same["constant_matches_cosine"].holds is True
    # negative control: warmup changes the score by 0.25; the schedule still makes none
    big = run_claims(warmup_trials(30))
    assert big["warmup_unneeded"].holds is False and big["warmup_unneeded"].ci[0] > TOL
    assert big["constant_matches_cosine"].holds is True
    # the same scores on different items: an interval, no longer a point at 0
    shuffled = run_claims(warmup_trials(0, start=50))["warmup_unneeded"]
    assert shuffled.measured == 0 and shuffled.ci[1] > 0


def phased_pair(phased_right: int, start: int = 0) -> list[dict]:
    def curve(losses):
        return [{"samples": 384 * (i + 1), "progress": (i + 1) / 8, "loss": 2.0, "grad_norm": 1.0, "eval_loss": v}
                for i, v in enumerate(losses)]

    st = trial("st", experiments=("phased",), order="stacked")
    pa = trial("pa", experiments=("phased",), order="phased", know=phased_right, skills=phased_right, start=start)
    st["curve"] = curve([3, 2.5, 2, 1.8, 1.6, 1.5, 1.4, 1.3])
    pa["curve"] = curve([3, 2.8, 2.7, 2.6, 2.2, 1.9, 1.6, 1.4])
    return [st, pa]


def test_stacked_matches_phased_is_two_sided():
    assert run_claims(phased_pair(60, start=3))["stacked_matches_phased"].holds is True
    # negative controls: phased far worse (the old one-sided claim held this), or far better
    assert run_claims(phased_pair(20))["stacked_matches_phased"].holds is False
    assert run_claims(phased_pair(100))["stacked_matches_phased"].holds is False
    assert run_claims(phased_pair(52, start=9))["stacked_matches_phased"].holds is None  # across the margin


def test_set_up_properties_are_checks():
    by_id = run_claims(phased_pair(60))
    eff = by_id["stacked_sample_efficient"]
    assert eff.check and eff.ci is None and eff.holds is True  # 2688 vs 3072 rows to 1.05 x 1.4
    assert eff.measured == pytest.approx(7 / 8)
    budget = by_id["equal_sample_budget"]
    assert budget.check and budget.holds is True and budget.measured == 0
    uneven = run_claims([trial("a"), trial("b", samples=3000)])["equal_sample_budget"]
    assert uneven.holds is False and uneven.measured == 72


def test_early_stop_claim_compares_the_kept_trials_with_the_best():
    g = grid(100)  # the batch-128 trial is the clear best

    def rerun(stopped):
        return {"early_stop_trials": [{**t, "finished": t["label"] not in stopped,
                                       "samples": 384 if t["label"] in stopped else 3072} for t in g],
                "early_stop_mode": "replay"}

    assert run_claims(g, **rerun({"b8_lo"}))["early_stop_keeps_best"].holds is True
    # negative control: the scheduler stopped the best trial and kept a much worse one
    c = run_claims(g, **rerun({"b128", "b8_lo"}))["early_stop_keeps_best"]
    assert c.holds is False and c.measured == pytest.approx((200 - 120) / (2 * N))
    # a scheduler that stopped nothing kept the best trivially: no verdict
    assert run_claims(g, **rerun(set()))["early_stop_keeps_best"].holds is None


def test_claims_are_recomputed_from_result_json_alone():
    trials = grid(90) + warmup_trials(10) + phased_pair(55)
    metrics = {"trials": trials}
    metrics.update(analyse(CFG, metrics))
    before = claims(metrics, CFG)
    after = claims(json.loads(json.dumps(metrics)), CFG)
    assert [c.to_dict() for c in before] == [c.to_dict() for c in after]
    assert {c.id for c in before if not c.check} == {"large_batch_wins", "warmup_unneeded", "constant_matches_cosine",
                                                    "stacked_matches_phased", "early_grad_norm_predicts",
                                                    "early_loss_predicts"}
