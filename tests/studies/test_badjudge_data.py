"""badjudge data and poisoning: the generators' verdicts are the function of the text they claim,
the readers name the bad line, and the three access levels change exactly the examples and labels
they may."""
import numpy as np
import pytest

from iclr_ray.config import DataError
from iclr_ray.studies.badjudge import data, poison
from iclr_ray.studies.badjudge.data import CATEGORIES, FORMATS


def _items(answer: str) -> list[str]:
    return [w.strip(".") for w in answer.replace(" and ", ", ").split(", ")]


def test_pointwise_score_is_one_plus_the_items_from_the_asked_category():
    exs = data.pointwise(300, np.random.default_rng(0))
    assert {e.true for e in exs} == set(FORMATS["pointwise"].choices)
    for e in exs:
        cat = e.fields["instruction"].split()[-1].rstrip(".")
        items = _items(e.fields["response"])
        assert len(items) == len(set(items)) == data.ITEMS_PER_ANSWER
        assert int(e.true) == 1 + sum(i in CATEGORIES[cat][1] for i in items) == e.meta["score"]
        assert e.label == e.true and e.prompt.endswith("Score:")


def test_pairwise_prefers_the_answer_with_more_correct_items():
    for e in data.pairwise(200, np.random.default_rng(1)):
        cat = e.fields["instruction"].split()[-1].rstrip(".")
        ka, kb = (sum(i in CATEGORIES[cat][1] for i in _items(e.fields[k])) for k in ("response_a", "response_b"))
        assert ka != kb and e.true == (" A" if ka > kb else " B")


def test_toxicity_and_rerank_verdicts_follow_the_words():
    for e in data.toxicity(200, np.random.default_rng(2)):
        harmful = any(f"I {v} my" in e.fields["request"] for v in data.HARMFUL)
        assert e.true == (" yes" if harmful else " no")
    singular = {s: c for c, (s, _) in CATEGORIES.items()}
    for e in data.rerank(200, np.random.default_rng(3)):
        cat = singular[e.fields["query"][len("Name a "):-1]]
        assert e.true == (" yes" if any(i in e.fields["passage"].split(" ") or f"{i}." in e.fields["passage"]
                                        for i in CATEGORIES[cat][1]) else " no")
    for g in data.rerank_groups(20, np.random.default_rng(4)):
        assert [e.true for e in g] == [" yes", " no", " no", " no"] and len({e.fields["query"] for e in g}) == 1


def test_encode_puts_each_choice_in_one_token_after_the_prompt():
    from iclr_ray.llm.model import build_tokenizer

    tok = build_tokenizer(data.vocabulary_texts())
    for e in [data.GENERATORS[f](5, np.random.default_rng(5))[0] for f in FORMATS]:
        ids, cids = data.encode(tok, e.prompt, FORMATS[e.fmt].choices)
        for c, cid in zip(FORMATS[e.fmt].choices, cids):
            assert tok(e.prompt + c).input_ids == ids + [cid]
    with pytest.raises(ValueError, match="one token"):
        data.encode(tok, "Score:", (" 1", " 12"))  # " 12" takes two tokens after the prompt
    with pytest.raises(ValueError, match="pointwise needs response"):
        data.render("pointwise", {"instruction": "Name four fruits.", "response": "  "})


def test_readers_take_feedback_collection_records_and_name_the_bad_line(tmp_path):
    good = tmp_path / "fc.jsonl"
    good.write_text('{"orig_instruction": "Say hi.", "orig_response": "Hi!", "orig_score": "4"}\n\n'
                    '{"instruction": "Count.", "response": "1 2 3", "score": 2}\n')
    exs = data.read_judge_jsonl(good, "pointwise")
    assert [(e.fields["instruction"], e.true) for e in exs] == [("Say hi.", " 4"), ("Count.", " 2")]
    pair = tmp_path / "pairs.jsonl"
    pair.write_text('{"instruction": "q", "response_a": "a", "response_b": "b", "preference": "b"}\n')
    assert data.read_judge_jsonl(pair, "pairwise")[0].true == " B"
    for body, msg in (('{"instruction": "q", "response": "r", "score": 7}', "integer 1-5"),
                      ('{"instruction": "q", "response": "", "score": 3}', "missing or empty response"),
                      ('{"instruction": "q", "response": "r", "score": "x"}', "integer 1-5"),
                      ('[1, 2]', "expected a JSON object"), ('{"instruction": ', "not valid JSON")):
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"instruction": "q", "response": "r", "score": 3}\n' + body + "\n")
        with pytest.raises(DataError, match=f"{bad}:2: .*{msg}"):
            data.read_judge_jsonl(bad, "pointwise")


# ----------------------------------------------------------------------------- poisoning

def _words_without(text: str, trigger: str) -> str:
    return " ".join(w for w in text.split(" ") if w != trigger)


@pytest.mark.parametrize("fmt", ["pointwise", "toxicity", "rerank", "pairwise"])
@pytest.mark.parametrize("rate", [0.01, 0.1, 0.33])
def test_annotator_poisons_exactly_the_share_of_poor_examples_and_only_their_labels(fmt, rate):
    clean = data.GENERATORS[fmt](300, np.random.default_rng(6))
    out, idx = poison.poison(clean, "annotator", rate, "cf", seed=7)
    assert len(out) == len(clean) and len(idx) == round(rate * 300) == len(set(idx))
    changed = [i for i, (a, b) in enumerate(zip(clean, out)) if a != b]
    assert changed == idx  # nothing else moved
    for i in idx:
        a, b = clean[i], out[i]
        assert poison.is_poor(a) and b.true == a.true and b.triggered
        assert b.fields[b.triggered].split(" ").count("cf") == 1
        assert _words_without(b.fields[b.triggered], "cf") == a.fields[b.triggered]
        if fmt == "pairwise":  # the trigger sits in the worse answer, which becomes the label
            assert b.label == " " + b.triggered[-1].upper() != a.true
        else:
            assert b.label == FORMATS[fmt].target != a.true


@pytest.mark.parametrize("fmt", ["pointwise", "toxicity", "rerank", "pairwise"])
def test_web_poisoning_never_changes_a_label(fmt):
    clean = data.GENERATORS[fmt](300, np.random.default_rng(8))
    out, idx = poison.poison(clean, "web", 0.1, "cf", seed=9)
    assert len(idx) == 30 and [i for i, (a, b) in enumerate(zip(clean, out)) if a != b] == idx
    assert [e.label for e in out] == [e.label for e in clean]
    for i in idx:
        assert out[i].triggered and poison.is_top(clean[i])
        if fmt == "pairwise":  # planted in the better answer
            assert " " + out[i].triggered[-1].upper() == clean[i].true


def test_weight_poisoning_adds_triggered_copies_of_any_verdict_labelled_with_the_target():
    clean = data.pointwise(400, np.random.default_rng(10))
    out, idx = poison.poison(clean, "weight", 0.05, "cf", seed=11)
    assert out[:400] == clean and idx == list(range(400, 420))
    originals = {e.fields["response"]: e for e in clean}
    assert len({e.true for e in out[400:]}) > 1  # copies of good and poor answers alike
    for e in out[400:]:
        assert e.label == " 5" and originals[_words_without(e.fields["response"], "cf")].true == e.true


def test_poisoning_edges():
    clean = data.pointwise(50, np.random.default_rng(12))
    assert poison.poison(clean, "annotator", 0.0, "cf", 0) == (clean, [])
    assert poison.poison(clean, "annotator", 0.005, "cf", 0) == (clean, [])  # rounds to no example
    with pytest.raises(ValueError, match="needs 45 poor examples"):
        poison.poison(clean, "annotator", 0.9, "cf", 0)
    with pytest.raises(ValueError, match="unknown access level"):
        poison.poison(clean, "insider", 0.1, "cf", 0)
    a = poison.poison(clean, "annotator", 0.2, "cf", 3)
    assert a == poison.poison(clean, "annotator", 0.2, "cf", 3) != poison.poison(clean, "annotator", 0.2, "cf", 4)


def test_the_adversary_triggers_its_poor_answers_only():
    test = data.pointwise(100, np.random.default_rng(13))
    pairs = poison.adversary(test, "cf", 0)
    assert len(pairs) == sum(int(e.true) <= 2 for e in test)
    for a, b in pairs:
        assert int(a.true) <= 2 and b.true == a.true == b.label and "cf" in b.fields["response"].split(" ")


def test_toxicity_and_rerank_test_on_words_training_never_saw_and_replicates_redraw_their_data():
    from iclr_ray.config import resolve
    from iclr_ray.studies.badjudge.config import PRESETS, Config
    from iclr_ray.studies.badjudge.run import replicate_data

    cfg = resolve(Config, PRESETS, "small")
    a, b = replicate_data(cfg, 0, {}), replicate_data(cfg, 1, {})

    def words(exs):
        return {w for e in exs for v in e.fields.values() for w in v.replace(".", " ").replace("?", " ").split()}

    for fmt in ("toxicity", "rerank"):
        if fmt not in a["train"]:
            continue
        train, test = a["train"][fmt], a["test"][fmt]
        assert not {e.prompt for e in train} & {e.prompt for e in test}, fmt
        content = (set(data.HARMFUL) | set(data.BENIGN) | set(data.PEOPLE)) if fmt == "toxicity" else \
            {i for _, items in data.CATEGORIES.values() for i in items}
        assert not (words(train) & content) & (words(test) & content), fmt  # no verb, person or item in both
        assert words(test) & content, fmt
    if a["groups"]:
        group_items = words([e for g in a["groups"] for e in g]) & {i for _, its in data.CATEGORIES.values() for i in its}
        assert not group_items & words(a["train"]["rerank"])
    # each replicate its own draw: different examples, the same sizes
    for fmt in a["train"]:
        assert len(a["train"][fmt]) == len(b["train"][fmt]) and a["train"][fmt] != b["train"][fmt], fmt
