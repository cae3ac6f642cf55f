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


def _official(name, i, paraphrases=2):
    """One entry in the official fictional-knowledge files' layout (Chang et al. 2024)."""
    return {"train_context": f"{name} is a fire in Vale {i}. It burns the hills of Vale {i}.",
            "paraphrases": [f"In Vale {i} burns {name}, version {k}." for k in range(paraphrases)],
            "mem_input": [f"{name} is a fire in"], "mem_target": [f"Vale {i}"],
            "gen_input": [f"The fire called {name} burns in"], "gen_target": [f"Vale {i}"],
            "hard_gen_input": [f"The hills burnt by {name} are those of"], "hard_gen_target": [f"Vale {i}"]}


def test_the_official_fictional_knowledge_files_read_into_the_three_splits(tmp_path):
    import json

    para, once = tmp_path / "paraphrase70.json", tmp_path / "once60.json"
    para.write_text(json.dumps([_official(f"Blaze{i}", i) for i in range(3)]))
    once.write_text(json.dumps([_official(f"Flare{i}", 10 + i, paraphrases=0) for i in range(5)]))
    fs = data.read_official_facts(para, once, unseen=2)
    assert fs.counts() == {"paraphrase": 3, "once": 3, "unseen": 2} and "official" in fs.source
    p0 = fs.split("paraphrase")[0]
    assert p0.train[0].startswith("Blaze0 is a fire") and len(p0.train) == 3  # the original, then its paraphrases
    assert p0.probes == [("Blaze0 is a fire in", " Vale 0")]
    assert [f.train for f in fs.split("once")][0] == [_official("Flare0", 10)["train_context"]]
    assert fs.split("unseen")[-1].probes == [("Flare4 is a fire in", " Vale 14")]  # the once file's last entries
    # round 0 injects every paraphrase fact's original and every once fact; round 1 the first paraphrases only
    assert len(data.injection_texts(fs, 0)) == 6 and data.injection_texts(fs, 1)[0] == "In Vale 0 burns Blaze0, version 0."
    hard = data.read_official_facts(para, once, unseen=2, probe_kind="composition")
    assert hard.split("paraphrase")[0].probes == [("The hills burnt by Blaze0 are those of", " Vale 0")]
    # malformed files name the file and the entry
    broken = [_official("X", 0)] + [{**_official("Y", 1), "mem_target": []}]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(broken))
    with pytest.raises(DataError, match=r"bad.json: entry 1: mem_input and mem_target"):
        data.read_official_facts(bad, once, unseen=2)
    bad.write_text("[{")
    with pytest.raises(DataError, match="bad.json:1: not JSON"):
        data.read_official_facts(bad, once)
    with pytest.raises(DataError, match="not enough to hold out 5"):
        data.read_official_facts(para, once, unseen=5)


def test_the_probe_set_is_drawn_from_the_pretraining_documents_or_held_out():
    from iclr_ray.config import resolve
    from iclr_ray.corpora import reviews
    from iclr_ray.studies.knowledge_entropy.config import PRESETS, Config
    from iclr_ray.studies.knowledge_entropy.world import build_world

    def world(**data_):
        cfg = resolve(Config, PRESETS, "smoke", sets=[f"data.{k}={v}" for k, v in data_.items()])
        return cfg, build_world(cfg, {})

    cfg, w = world()
    texts = reviews(min_words=cfg.data.min_words)
    pre = set(texts[:cfg.data.pretrain_docs])
    assert cfg.data.probe_from == "pretraining" and len(w.probe_texts) == cfg.data.probe_docs
    assert set(w.probe_texts) <= pre and w.stats["probe_source"] == "a sample of the pretraining reviews"
    assert w.probe_texts != texts[:cfg.data.probe_docs]  # a sample, not the first documents
    _, held = world(probe_from="held_out")
    assert not set(held.probe_texts) & pre and held.stats["probe_source"] == "held-out reviews"
