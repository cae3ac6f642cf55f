"""pad's data: the rules that score replies, preferences and combinations, the query generator's
held-out split, pairs from samples, the label-shuffled control and the JSONL readers."""
import json

import numpy as np
import pytest

from iclr_ray.config import DataError
from iclr_ray.studies.pad import data


def test_rules_score_what_they_name():
    assert data.simple("The cat sat on a mat.") == 1.0
    assert data.simple("Extraordinary considerations notwithstanding.") == 0.0
    assert data.simple("I am fascinated") == pytest.approx(2 / 3)
    assert data.excited("Great! Let us go! Fine.") == pytest.approx(2 / 3)
    assert data.excited("No exclamations here. None at all.") == 0.0
    assert data.excited("Wow! and then it was cut") == pytest.approx(1 / 2)  # an unfinished sentence counts
    assert data.personal("You can do it, and your friends will help you.") == pytest.approx(3 / 10)
    assert data.personal("It is raining.") == 0.0
    assert all(r("") == 0.0 for r in data.RULES.values())


def test_combinations_state_both_and_score_the_mean():
    pref = data.preference("excited+personal")
    assert pref.rules == ("excited", "personal")
    assert data.SINGLES["excited"].text in pref.text and data.SINGLES["personal"].text in pref.text
    text = "You will love it! It is fun."
    assert data.score(text, pref) == pytest.approx((data.excited(text) + data.personal(text)) / 2)
    for bad in ("formal", "simple+simple", "simple+nope"):
        with pytest.raises(ValueError, match="unknown preference"):
            data.preference(bad)
    assert data.preference_text("simple") == data.SINGLES["simple"].text
    assert data.preference_text("Answer like a pirate.") == "Answer like a pirate."


def test_held_out_queries_are_about_topics_no_training_query_mentions():
    train, held = data.queries(200, held_out=False), data.queries(60, held_out=True)
    assert len(set(train)) == 200 and len(set(held)) == 60
    cut = 2 * len(data.TOPICS) // 3
    for q in held:
        assert not any(t in q for t in data.TOPICS[:cut])
    assert data.queries(10, held_out=True, seed=3) == data.queries(10, held_out=True, seed=3)
    with pytest.raises(DataError, match="held-out"):
        data.queries(10_000, held_out=True)


def test_pairs_take_the_best_and_worst_sample_and_skip_ties():
    samples = [("q1", ["You and your plan! Yes!", "It is a plan.", "You see."]),
               ("q2", ["Same text.", "Same text."])]
    pairs = data.build_pairs(samples, ["personal", "excited"], min_gap=0.05)
    by = {(p.query, p.preference): p for p in pairs}
    assert set(by) == {("q1", "personal"), ("q1", "excited")}  # q2 ties under every rule
    assert by["q1", "personal"].rejected == "It is a plan."
    assert by["q1", "personal"].chosen == "You see."  # 1/2 of its words address the reader
    assert by["q1", "excited"].chosen == "You and your plan! Yes!"
    assert all(p.gap >= 0.05 for p in pairs)
    assert data.build_pairs(samples, ["personal"], min_gap=0.9) == []


def test_the_shuffled_control_swaps_a_random_half():
    swaps = data.label_swaps(41, seed=0)
    assert swaps.dtype == bool and swaps.sum() == 20
    assert (swaps == data.label_swaps(41, seed=0)).all() and (swaps != data.label_swaps(41, seed=1)).any()


def test_readers_take_real_files_and_name_the_bad_line(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "How do I sleep?"}) + "\n\n" + json.dumps({"instruction": "Hi"}) + "\n")
    assert data.read_prompts(prompts) == ["How do I sleep?", "Hi"]
    pairs = tmp_path / "pairs.jsonl"
    row = {"prompt": "q", "preference": "Be brief.", "chosen": "Yes.", "rejected": "Well, perhaps, let me see."}
    pairs.write_text(json.dumps(row) + "\n")
    got = data.read_pairs(pairs)
    assert got[0].preference == "Be brief." and np.isnan(got[0].gap)
    pairs.write_text(json.dumps(row) + "\n" + json.dumps({**row, "chosen": ""}) + "\n")
    with pytest.raises(DataError, match=r"pairs.jsonl:2: .*chosen"):
        data.read_pairs(pairs)
    prompts.write_text("{not json\n")
    with pytest.raises(DataError, match=r"prompts.jsonl:1: not valid JSON"):
        data.read_prompts(prompts)
    with pytest.raises(DataError, match="cannot read"):
        data.read_prompts(tmp_path / "missing.jsonl")
