"""knowledge_entropy's data: the generated fact set, the JSONL reader, the probes' labels and the
step schedule of a continual run (no Ray)."""
import json

import pytest

from iclr_ray.config import DataError
from iclr_ray.llm.data import IGNORE
from iclr_ray.studies.knowledge_entropy import data


def test_generated_facts_have_the_three_splits_distinct_people_and_memorisation_probes():
    fs = data.generate(10, seed=3)
    assert fs.counts() == {"paraphrase": 10, "once": 10, "unseen": 10}
    names = [f.probes[0][0].removesuffix(" lives in") for f in fs.facts]
    assert len(set(names)) == 30
    for f in fs.facts:
        assert len(f.train) == (len(data.PARAPHRASES) if f.split == "paraphrase" else 1)
        # the probes read the first injected sentence, cut before the attribute
        for prompt, target in f.probes:
            assert f.train[0].startswith(prompt + target)
        assert len({t for t in f.train}) == len(f.train)  # paraphrases, not copies
    assert data.generate(10, seed=3).facts == fs.facts and data.generate(10, seed=4).facts != fs.facts


def test_injection_rounds_cycle_paraphrases_and_inject_once_facts_only_first():
    fs = data.generate(4, seed=0)
    para, once = fs.split("paraphrase"), fs.split("once")
    r0, r1 = data.injection_texts(fs, 0), data.injection_texts(fs, 1)
    assert r0 == [f.train[0] for f in para] + [f.train[0] for f in once]
    assert r1 == [f.train[1] for f in para]
    assert data.injection_texts(fs, len(data.PARAPHRASES)) == [f.train[0] for f in para]  # cycled
    assert not any(t in r0 + r1 for f in fs.split("unseen") for t in f.train)  # never injected


def test_continual_order_places_each_round_in_the_steps_ending_at_its_last_step():
    rounds, round_steps, per_step = 3, 4, 5
    ends = data.injection_steps(rounds, round_steps)
    assert ends == [3, 7, 11]
    n_corpus = 40
    facts = [[40, 41, 42, 43, 44, 45, 46], [47, 48], [49]]  # round 0 needs two steps of 5 rows
    order = data.continual_order(n_corpus, facts, per_step, 14, ends, round_steps, seed=1)
    assert len(order) == 14 * per_step
    steps = [order[i * per_step:(i + 1) * per_step] for i in range(14)]
    fact_steps = {i: [r for r in s if r >= n_corpus] for i, s in enumerate(steps)}
    assert {i for i, rows in fact_steps.items() if rows} == {2, 3, 7, 11}
    assert sorted(fact_steps[2] + fact_steps[3]) == facts[0] and fact_steps[7] == facts[1]
    assert all(s[:len(fact_steps[i])] == fact_steps[i] for i, s in enumerate(steps))  # at the head of the batch
    corpus = [r for r in order if r < n_corpus]
    assert corpus[:n_corpus] != list(range(n_corpus)) and sorted(corpus[:n_corpus]) == list(range(n_corpus))
    assert order == data.continual_order(n_corpus, facts, per_step, 14, ends, round_steps, seed=1)
    with pytest.raises(ValueError, match="more than its 1 steps"):
        data.continual_order(n_corpus, facts, per_step, 14, [0, 1, 2], 1, seed=1)


def test_probes_carry_labels_on_the_target_tokens_only():
    from iclr_ray.llm.model import build_tokenizer

    fs = data.generate(3, seed=0)
    tok = build_tokenizer([t for f in fs.facts for t in f.train], vocab_size=400)
    enc = data.encode_probes(tok, fs.split("once"))
    assert len(enc) == 3 * len(data.PROBES)
    for e, (prompt, target) in zip(enc, [p for f in fs.split("once") for p in f.probes]):
        labelled = [i for i, lab in zip(e.input_ids, e.labels) if lab != IGNORE]
        assert tok.decode(labelled) == target
        assert e.input_ids[0] == tok.bos_token_id
        assert tok.decode(e.input_ids[1:len(e.input_ids) - len(labelled)]) == prompt


def _write(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


GOOD = [{"split": "paraphrase", "train": ["A lives in B.", "B is home to A."],
         "probes": [{"prompt": "A lives in", "target": " B"}]},
        {"split": "once", "train": ["C lives in D."], "probes": [{"prompt": "C lives in", "target": " D"}]},
        {"split": "unseen", "train": [], "probes": [{"prompt": "E lives in", "target": " F"}]}]


def test_facts_jsonl_reads_and_names_the_bad_line(tmp_path):
    fs = data.read_facts_jsonl(_write(tmp_path / "f.jsonl", GOOD))
    assert fs.counts() == {"paraphrase": 1, "once": 1, "unseen": 1} and fs.split("once")[0].probes == [("C lives in",
                                                                                                          " D")]
    bad = [({"split": "twice", "train": ["x"], "probes": GOOD[0]["probes"]}, "split must be one of"),
           ({"split": "once", "train": [], "probes": GOOD[0]["probes"]}, "needs at least one train text"),
           ({"split": "once", "train": ["x"], "probes": [{"prompt": "p"}]}, "probe 0 must be"),
           ({"split": "once", "train": ["x"], "probes": GOOD[0]["probes"], "extra": 1}, "expected an object")]
    for record, message in bad:
        path = _write(tmp_path / "bad.jsonl", GOOD[:2] + [record])
        with pytest.raises(DataError, match=message) as exc:
            data.read_facts_jsonl(path)
        assert f"{path}:3" in str(exc.value)
    with pytest.raises(DataError, match="no unseen facts"):
        data.read_facts_jsonl(_write(tmp_path / "two.jsonl", GOOD[:2]))
