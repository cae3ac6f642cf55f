"""sft_recipe's pure parts: the generated data, the recipe arithmetic, the early profile and the
early-termination rule."""
import math
import random

import pytest

from iclr_ray.studies.sft_recipe import data as gen
from iclr_ray.studies.sft_recipe import recipe


def test_generation_is_seeded_and_held_out_items_are_new():
    a, b = gen.generate(3, 20, 60, 30), gen.generate(3, 20, 60, 30)
    assert [i.prompt for i in a.train] == [i.prompt for i in b.train] and a.pretrain == b.pretrain
    assert gen.generate(4, 20, 60, 30).train[0].prompt != a.train[0].prompt
    train_prompts = {i.prompt for i in a.train}
    assert not train_prompts & {i.prompt for i in a.eval_knowledge + a.eval_skills if i.domain != "add"}
    assert {i.domain for i in a.train_knowledge} == set(gen.KNOWLEDGE_DOMAINS)
    assert {i.domain for i in a.train_skills} == set(gen.SKILLS)


def test_knowledge_items_are_answerable_from_their_document():
    rng = random.Random(0)
    for domain in gen.KNOWLEDGE_DOMAINS:
        for _ in range(50):
            it = gen.knowledge_item(domain, rng)
            doc, question = it.prompt.split("\nQuestion: ")
            assert it.answer in doc and len(set(it.choices)) == 4 and it.choices[it.correct] == it.answer
            # exactly one sentence is about the subject asked about, and it holds the answer
            sentences = [x for x in doc.split(".") if x.strip()]
            subjects = [x.strip().removeprefix("The ").split(" l")[0].split(" eats")[0] for x in sentences]
            about = [x for x, subj in zip(sentences, subjects) if subj in question]
            assert len(about) == 1 and it.answer in about[0]


@pytest.mark.parametrize("skill", gen.SKILLS)
def test_skill_answers_follow_their_rule(skill):
    rng = random.Random(1)
    for _ in range(30):
        it = gen.skill_item(skill, rng)
        payload = it.prompt.split(": ", 1)[-1].split()
        expected = {"repeat": " ".join(payload), "last_word": payload[-1] if payload else None,
                    "swap": " ".join(payload[::-1]), "reverse_order": " ".join(payload[::-1]),
                    "count": str(len(payload))}.get(skill)
        if skill == "add":
            a, b = (int(w.strip(".")) for w in it.prompt.split()[1::2])
            expected = str(a + b)
        assert it.answer == expected


def test_batch_split_and_budget():
    assert recipe.batch_split(32, 8, 1) == (8, 4)
    assert recipe.batch_split(32, 8, 2) == (8, 2)
    assert recipe.batch_split(12, 8, 1) == (6, 2)  # the largest micro-batch that divides
    assert recipe.batch_split(4, 8, 1) == (4, 1)
    with pytest.raises(ValueError, match="does not split over 3 workers"):
        recipe.batch_split(32, 8, 3)
    assert recipe.steps_for_budget(3072, 128) == 24 and recipe.steps_for_budget(10, 32) == 1


def test_phased_order_has_the_stacked_mix_in_two_phases():
    order = recipe.phased_order(30, 10, 200, seed=0)
    assert len(order) == 200
    first, second = order[:150], order[150:]  # 30:10 of the rows -> 150:50 of the budget
    assert all(i < 30 for i in first) and all(30 <= i < 40 for i in second)
    assert sorted(first[:30]) == list(range(30))  # each pass is a permutation
    assert order == recipe.phased_order(30, 10, 200, seed=0) != recipe.phased_order(30, 10, 200, seed=1)


def test_early_profile_averages_the_same_rows_at_every_batch():
    def curve(batch, steps, norm):
        return [{"samples": batch * k, "progress": k / steps, "grad_norm": norm(k), "loss": 10.0 - k}
                for k in range(1, steps + 1)]

    # 32 rows: 4 steps of 8 rows, 1 step of 32, whatever share of their budgets that is
    assert recipe.early_profile(curve(8, 40, float), 32) == (2.5, 7.5)
    assert recipe.early_profile(curve(32, 10, float), 32) == (1.0, 9.0)
    assert recipe.early_profile(curve(64, 5, float), 32) == (1.0, 9.0)  # at least the first step
    assert all(map(math.isnan, recipe.early_profile([], 32)))


def test_spearman_and_samples_to_reach():
    assert recipe.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1)
    assert math.isnan(recipe.spearman([1, 2], [1, 2])) and math.isnan(recipe.spearman([1, 1, 1], [1, 2, 3]))
    curve = [(10, 3.0), (20, 2.0), (30, 1.0)]
    assert recipe.samples_to_reach(curve, 2.0) == 20 and recipe.samples_to_reach(curve, 0.5) == math.inf


def test_early_rank_score_orders_by_the_papers_predictors():
    from iclr_ray.sweep.scheduler import early_rank_score

    g, loss = [3.0, 1.0, 2.0], [1.0, 3.0, 2.0]
    assert list(early_rank_score(g, loss, "grad_norm")) == [1.0, 0.0, 0.5]  # high grad norm: worst
    assert list(early_rank_score(g, loss, "loss")) == [1.0, 0.0, 0.5]  # low loss: worst
    assert list(early_rank_score([1.0, 2.0], [1.0, 2.0], "both")) == [0.5, 0.5]
    assert list(early_rank_score([0.0, 0.0, 0.0], [1.0, 1.0, 1.0], "grad_norm")) == [0.5, 0.5, 0.5]  # ties share


class _Trial:
    def __init__(self, tid):
        self.trial_id = tid


def _feed(s, tid, norms, batch=8):
    return [s.on_trial_result(None, _Trial(tid), {"samples": batch * k, "grad_norm": g, "loss": 1.0})
            for k, g in enumerate(norms, start=1)]


def test_scheduler_stops_trials_whose_early_grad_norm_ranks_worst():
    from ray.tune.schedulers import TrialScheduler

    from iclr_ray.sweep.scheduler import EarlyDynamicsStopper

    s = EarlyDynamicsStopper(window_rows=16, keep=0.5, min_trials=2)
    assert set(_feed(s, "a", [1.0] * 10)) == {TrialScheduler.CONTINUE}  # alone: nothing to compare with
    assert _feed(s, "b", [5.0, 5.0, 0.1])[:2] == [TrialScheduler.CONTINUE, TrialScheduler.STOP]  # decided at 16 rows
    assert set(_feed(s, "c", [0.5] * 10)) == {TrialScheduler.CONTINUE}  # best so far
    assert s.stopped == {"b": 16} and s.profiles["b"] == (5.0, 1.0)
    # the window counts rows: a batch of 16 is profiled on its first step only, as a batch of 8 on two
    assert _feed(s, "d", [9.0, 0.1], batch=16)[0] == TrialScheduler.STOP and s.profiles["d"] == (9.0, 1.0)
    # the result that crosses the window decides but is not part of the profile (as early_profile)
    s2 = EarlyDynamicsStopper(window_rows=20, keep=0.5, min_trials=1)
    _feed(s2, "e", [1.0, 3.0, 100.0])
    assert s2.profiles["e"] == (2.0, 1.0)
    assert recipe.early_profile([{"samples": 8 * k, "grad_norm": g, "loss": 1.0}
                                 for k, g in enumerate([1.0, 3.0, 100.0], start=1)], 20) == (2.0, 1.0)
    with pytest.raises(ValueError):
        EarlyDynamicsStopper(window_rows=0)


def test_scheduler_does_not_rank_identical_profiles_by_arrival():
    """Every grad norm 0 (what ZeRO stage 0 logged before the loop took its own norm): the profiles
    cannot tell the trials apart, so none is stopped, whichever arrives last."""
    from ray.tune.schedulers import TrialScheduler

    from iclr_ray.sweep.scheduler import EarlyDynamicsStopper

    s = EarlyDynamicsStopper(window_rows=16, keep=0.5, min_trials=2)
    for tid in "abcd":
        assert set(_feed(s, tid, [0.0] * 4)) == {TrialScheduler.CONTINUE}
    assert s.stopped == {}
