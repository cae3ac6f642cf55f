"""moee's data: the review tasks have the structure each task type needs, built from reviews the
pre-training text never holds; MTEB's split layouts convert, and a malformed one is one clear error."""
from types import SimpleNamespace

import numpy as np
import pytest

from iclr_ray.config import DataError
from iclr_ray.studies.moee import data as D

SIZES = SimpleNamespace(sts_pairs=90, train_per_class=5, test_items=40, cluster_subsets=3, cluster_size=50,
                        pairs=60, queries=12, candidates=5)


@pytest.fixture(scope="module")
def split():
    pytest.importorskip("pandas")
    return D.split(D.load_reviews(), 600, seed=0)


def test_pool_and_pretraining_text_are_disjoint(split):
    pre, pool = split
    assert len(pool) == 600 and len(pre) > 15_000
    assert not set(pool.text) & set(pre.text)
    docs = D.pretrain_documents(pre.take(np.arange(3)))
    assert docs[0] == f"{pre.text[0]}\nTitle: {pre.title[0]}"
    assert "Trend" not in set(pool.department)


def test_review_tasks_have_their_structure(split):
    _, pool = split
    sts, clf, clu, pair, rr = D.build_tasks(pool, SIZES, seed=0)
    assert [t.kind for t in (sts, clf, clu, pair, rr)] == list(D.KINDS)
    # STS: every grade 0..3 occurs, and the grade is the agreement count
    assert set(sts.target) == {0.0, 1.0, 2.0, 3.0} and sts.pairs.max() < len(sts.texts) and sts.units() == 90
    text_row = {t: i for i, t in enumerate(pool.text)}
    a, b = (np.array([text_row[sts.texts[j]] for j in sts.pairs[:, k]]) for k in (0, 1))
    same_class = pool.klass[a] == pool.klass[b]
    assert np.all(sts.target[same_class] >= 2) and np.all(sts.target[~(pool.department[a] == pool.department[b])] <= 1)
    # classification: balanced training set, test items disjoint from it
    counts = np.unique(clf.labels[clf.train], return_counts=True)[1]
    assert len(counts) == 5 and set(counts) == {5} and not set(clf.train) & set(clf.test) and clf.units() == 40
    # clustering: subsets of the pool, labelled by class
    assert len(clu.subsets) == 3 and all(len(s) == 50 for s in clu.subsets) and len(clu.labels) == len(clu.texts)
    # pairs: a title with its own review, or with a review of another department
    pair = D.pair_task(pool, 60, np.random.default_rng(5))
    title_rows = np.random.default_rng(5).choice(len(pool), 60, replace=False)  # the task's first draw
    for (i, j), y, t in zip(pair.pairs, pair.target, title_rows):
        assert pair.texts[i] == pool.title[t]
        if y:
            assert pair.texts[j] == pool.text[t]
        else:
            assert pool.department[text_row[pair.texts[j]]] != pool.department[t]
    assert pair.target.mean() == 0.5
    # reranking: the query is a title, its own review the first (relevant) candidate, same-class negatives
    klass = {t: k for t, k in zip(pool.text, pool.klass)}
    for q, cands, rel in zip(rr.queries, rr.candidates, rr.relevant):
        assert rel.tolist() == [True] + [False] * 4
        own = rr.texts[cands[0]]
        assert pool.title[text_row[own]] == rr.texts[q] and all(klass[rr.texts[c]] == klass[own] for c in cands)


def test_the_dev_split_keeps_every_test_units_text_out_of_the_statistics(split):
    _, pool = split
    for task in D.build_tasks(pool, SIZES, seed=0):
        if task.kind == "clustering":
            continue
        dev = task.dev_units(0.3, seed=0)
        n = task.units()
        assert len(dev) == int(0.3 * n) and len(set(dev)) == len(dev) and dev.max() < n, task.kind
        assert np.array_equal(dev, task.dev_units(0.3, seed=0))  # seeded
        fit = task.fit_texts(dev)
        test_texts = np.concatenate([task.unit_texts(i) for i in np.setdiff1d(np.arange(n), dev)])
        assert len(fit) and not set(fit) & set(test_texts), task.kind
        if task.kind == "classification":  # the classifier's training items are no test unit's
            assert set(task.train) <= set(fit)
    clusters = D.build_tasks(pool, SIZES, seed=0)[2]
    assert len(clusters.dev_units(0.3, 0)) == 0  # 3 subsets: a dev split would leave fewer than 3 test units
    assert len(clusters.fit_texts(clusters.dev_units(0.3, 0))) == 0


def test_mteb_layouts_convert():
    sts = D.from_mteb_split("sts", "STS12", {"sentence1": ["a", "b"], "sentence2": ["c", "a"], "score": [4.0, 1.5]})
    assert sts.texts == ["a", "b", "c"] and sts.pairs.tolist() == [[0, 2], [1, 0]] and sts.target.tolist() == [4.0, 1.5]
    pc = D.from_mteb_split("pair_classification", "P", {"sentence1": [["a", "b"]], "sentence2": [["c", "d"]],
                                                        "labels": [[1, 0]]})
    assert pc.pairs.tolist() == [[0, 2], [1, 3]] and pc.target.tolist() == [1.0, 0.0]
    cl = D.from_mteb_split("clustering", "C", {"sentences": [["a", "b"], ["c", "d", "e"]],
                                               "labels": [[0, 1], [1, 1, 0]]})
    assert [s.tolist() for s in cl.subsets] == [[0, 1], [2, 3, 4]] and cl.labels.tolist() == [0, 1, 1, 1, 0]
    flat = D.from_mteb_split("clustering", "C2", {"sentences": ["a", "b"], "labels": ["x", "y"]})
    assert [s.tolist() for s in flat.subsets] == [[0, 1]]
    clf = D.from_mteb_split("classification", "E", {"text": ["t1", "t2"], "label": [0, 1]},
                            train={"text": ["r1"], "label": [1]})
    assert clf.train.tolist() == [0] and clf.test.tolist() == [1, 2] and clf.labels.tolist() == [1, 0, 1]
    with pytest.raises(DataError, match="STS9: the sts split has no column 'score'"):
        D.from_mteb_split("sts", "STS9", {"sentence1": ["a"], "sentence2": ["b"]})
    with pytest.raises(DataError, match="needs its train split"):
        D.from_mteb_split("classification", "E", {"text": ["t"], "label": [0]})
