"""moee's data: the review corpus split into the MoE LM's pre-training text and an evaluation pool,
the five embedding tasks built from the pool's real reviews (what each measures, and how its
labels come from the reviews' own metadata, is in :func:`build_tasks`), and MTEB's tasks for the
``paper`` preset (through the ``mteb`` package's own loaders).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ...config import ConfigError, DataError

KINDS = ("sts", "classification", "clustering", "pair_classification", "reranking")
"""the paper's task types that this study scores (MTEB's, less summarisation)"""

MIN_TEST_UNITS = 3
"""a task keeps at least this many test units after its dev split (the claims resample them)"""

COLUMNS = ["Clothing ID", "Title", "Review Text", "Rating", "Department Name", "Class Name"]


@dataclass
class Task:
    """One evaluation task over ``texts`` (each text encoded once; items index into them).

    - sts: ``pairs`` (n, 2) with graded ``target`` (Spearman of the similarities against it);
    - classification: ``labels`` per text, ``train``/``test`` indices (logistic regression);
    - clustering: ``labels`` per text, ``subsets`` (index arrays, each clustered on its own; V-measure);
    - pair_classification: ``pairs`` (n, 2), binary ``target`` (average precision of the similarity);
    - reranking: ``queries`` (q,) text indices, ``candidates`` (q, m) text indices, ``relevant``
      (q, m) bool (mean average precision of the candidates ranked by similarity)."""
    kind: str
    name: str
    texts: list[str]
    pairs: np.ndarray | None = None
    target: np.ndarray | None = None
    labels: np.ndarray | None = None
    train: np.ndarray | None = None
    test: np.ndarray | None = None
    subsets: list[np.ndarray] = field(default_factory=list)
    queries: np.ndarray | None = None
    candidates: np.ndarray | None = None
    relevant: np.ndarray | None = None
    note: str = ""

    def units(self) -> int:
        """How many units the task's score rests on (the bootstrap resamples them)."""
        return {"sts": lambda: len(self.pairs), "pair_classification": lambda: len(self.pairs),
                "classification": lambda: len(self.test), "clustering": lambda: len(self.subsets),
                "reranking": lambda: len(self.queries)}[self.kind]()

    def unit_texts(self, i: int) -> np.ndarray:
        """The text indices unit ``i`` reads (a pair's two, a test item, a subset, a query and its
        candidates)."""
        if self.kind in ("sts", "pair_classification"):
            return np.asarray(self.pairs[i])
        if self.kind == "classification":
            return np.asarray([self.test[i]])
        if self.kind == "clustering":
            return np.asarray(self.subsets[i])
        return np.concatenate([[self.queries[i]], np.asarray(self.candidates[i])])

    def dev_units(self, fraction: float, seed: int) -> np.ndarray:
        """A seeded choice of ``fraction`` of the units as the dev split (alpha is chosen on it, the
        z-scoring statistics are read from its texts), sorted; the rest are the test units the
        claims read. None where that would leave fewer than :data:`MIN_TEST_UNITS` test units (a
        task with one clustering set: every unit is a test unit)."""
        n = self.units()
        k = int(np.floor(fraction * n))
        if k < 1 or n - k < MIN_TEST_UNITS:
            return np.zeros(0, int)
        return np.sort(np.random.default_rng([seed, 7]).choice(n, k, replace=False))

    def fit_texts(self, dev: np.ndarray) -> np.ndarray:
        """The texts a standardiser may read: the dev units' and the classifier's training items',
        less every text a test unit reads (so no test unit's text is in the statistics)."""
        test = np.setdiff1d(np.arange(self.units()), dev)
        seen = [self.unit_texts(i) for i in dev] + ([np.asarray(self.train)] if self.kind == "classification" else [])
        if not seen:
            return np.zeros(0, int)
        held = np.concatenate([self.unit_texts(i) for i in test]) if len(test) else np.zeros(0, int)
        return np.setdiff1d(np.concatenate(seen), held)


@dataclass
class Reviews:
    """The reviews with a text, a title, a department and a class, as arrays (row = review)."""
    text: np.ndarray
    title: np.ndarray
    item: np.ndarray
    rating: np.ndarray
    department: np.ndarray
    klass: np.ndarray

    def __len__(self) -> int:
        return len(self.text)

    def take(self, idx) -> "Reviews":
        return Reviews(*(getattr(self, f)[idx] for f in ("text", "title", "item", "rating", "department", "klass")))


def load_reviews(min_class: int = 100) -> Reviews:
    """The review corpus's reviews that have a text, a title, a department and a class held by at
    least ``min_class`` reviews (drops the one-off classes and the "Trend" department)."""
    from ...corpora import review_table

    df = review_table(COLUMNS).dropna()
    df = df[df["Department Name"] != "Trend"]
    counts = df["Class Name"].value_counts()
    df = df[df["Class Name"].isin(counts[counts >= min_class].index)]
    return Reviews(df["Review Text"].astype(str).str.strip().to_numpy(), df["Title"].astype(str).str.strip().to_numpy(),
                   df["Clothing ID"].to_numpy(int), df["Rating"].to_numpy(int),
                   df["Department Name"].astype(str).to_numpy(), df["Class Name"].astype(str).to_numpy())


def split(reviews: Reviews, eval_docs: int, seed: int) -> tuple[Reviews, Reviews]:
    """(pre-training reviews, evaluation pool): a seeded shuffle, the pool its first ``eval_docs``.
    The MoE LM never sees a pool review."""
    if eval_docs >= len(reviews):
        raise ConfigError(f"data.eval_docs={eval_docs} leaves no pre-training text ({len(reviews)} reviews)")
    order = np.random.default_rng(seed).permutation(len(reviews))
    return reviews.take(order[eval_docs:]), reviews.take(order[:eval_docs])


def pretrain_documents(reviews: Reviews) -> list[str]:
    """The MoE LMs' pre-training text: each review followed by its title on a line of its own
    ("...\nTitle: ..."), the corpus's own one-line summary, so the LM learns to summarise a review
    at the ``title`` prompt's cue (moee.PROMPTS)."""
    return [f"{text}\nTitle: {title}" for text, title in zip(reviews.text, reviews.title)]


def _sentiment(rating: np.ndarray) -> np.ndarray:
    return np.digitize(rating, [3, 4])  # 1-2 negative, 3 mixed, 4-5 positive


def _unique_texts(*index_arrays: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The pool rows the arrays use, once each, and the arrays re-indexed into that list."""
    rows = np.unique(np.concatenate([a.ravel() for a in index_arrays]))
    where = {int(r): i for i, r in enumerate(rows)}
    return rows, [np.vectorize(where.__getitem__, otypes=[int])(a) if a.size else a for a in index_arrays]


def sts_task(pool: Reviews, n_pairs: int, rng: np.random.Generator) -> Task:
    """Graded similarity of two reviews, 0-3: one point each for the same department, the same
    class (garment type) and the same sentiment (rating 1-2, 3, 4-5). A third of the pairs share
    the class, a third only the department, a third are random, so every grade occurs."""
    n = len(pool)
    pairs = []
    for k in range(n_pairs):
        a = int(rng.integers(n))
        same = {0: pool.klass == pool.klass[a], 1: (pool.department == pool.department[a]) &
                (pool.klass != pool.klass[a])}.get(k % 3)
        choices = np.flatnonzero(same) if same is not None else np.arange(n)
        choices = choices[choices != a]
        pairs.append((a, int(rng.choice(choices if len(choices) else np.delete(np.arange(n), a)))))
    pairs = np.array(pairs)
    s = _sentiment(pool.rating)
    a, b = pairs[:, 0], pairs[:, 1]
    grade = ((pool.department[a] == pool.department[b]).astype(int) + (pool.klass[a] == pool.klass[b])
             + (s[a] == s[b]))
    rows, (pairs,) = _unique_texts(pairs)
    return Task("sts", "reviews-sts", list(pool.text[rows]), pairs=pairs, target=grade.astype(float),
                note="graded 0-3 by department, class and sentiment agreement")


def classification_task(pool: Reviews, train_per_class: int, n_test: int, rng: np.random.Generator) -> Task:
    """The department of a review (logistic regression on the embeddings): ``train_per_class``
    training reviews per department, ``n_test`` test reviews drawn from the rest."""
    labels = pool.department
    train = np.concatenate([rng.choice(np.flatnonzero(labels == c), train_per_class, replace=False)
                            for c in np.unique(labels)])
    rest = np.setdiff1d(np.arange(len(pool)), train)
    test = rng.choice(rest, min(n_test, len(rest)), replace=False)
    rows, (train, test) = _unique_texts(train, test)
    return Task("classification", "reviews-department", list(pool.text[rows]), labels=labels[rows], train=train,
                test=test, note=f"{len(np.unique(labels))} departments")


def clustering_task(pool: Reviews, n_subsets: int, subset_size: int, rng: np.random.Generator) -> Task:
    """Reviews clustered by garment class: ``n_subsets`` random subsets, each clustered on its own
    into as many clusters as it has classes (MTEB's clustering protocol)."""
    subsets = [rng.choice(len(pool), min(subset_size, len(pool)), replace=False) for _ in range(n_subsets)]
    rows, subsets = _unique_texts(*subsets)
    return Task("clustering", "reviews-class", list(pool.text[rows]), labels=pool.klass[rows], subsets=subsets,
                note=f"{len(np.unique(pool.klass))} classes")


def pair_task(pool: Reviews, n_pairs: int, rng: np.random.Generator) -> Task:
    """Is this title the review's own (a paraphrase-like pair: the title is its author's one-line
    summary)? Half the pairs are a title and its own review; the other half a title and a review
    from another department."""
    titles = rng.choice(len(pool), n_pairs, replace=len(pool) < n_pairs)
    reviews, target = [], []
    for k, t in enumerate(titles):
        if k % 2 == 0:
            reviews.append(int(t))
            target.append(1.0)
        else:
            reviews.append(int(rng.choice(np.flatnonzero(pool.department != pool.department[t]))))
            target.append(0.0)
    rows, (r,) = _unique_texts(np.array(reviews))
    texts = list(pool.text[rows]) + list(pool.title[titles])  # the titles after the review texts
    pairs = np.stack([np.arange(len(rows), len(rows) + len(titles)), r], 1)
    return Task("pair_classification", "reviews-title-pairs", texts, pairs=pairs, target=np.array(target),
                note="title and its own review, or a review of another department")


def reranking_task(pool: Reviews, n_queries: int, n_candidates: int, rng: np.random.Generator) -> Task:
    """A review's title as the query; its own review and ``n_candidates - 1`` reviews of the same
    class as the candidates."""
    queries = rng.choice(len(pool), min(n_queries, len(pool)), replace=False)
    cands = []
    for q in queries:
        others = np.flatnonzero((pool.klass == pool.klass[q]) & (np.arange(len(pool)) != q))
        neg = rng.choice(others, n_candidates - 1, replace=len(others) < n_candidates - 1)
        cands.append(np.concatenate([[q], neg]))
    cands = np.array(cands)
    n_text = len(np.unique(cands))
    rows, (c,) = _unique_texts(cands)
    texts = list(pool.text[rows]) + list(pool.title[queries])  # the titles after the review texts
    relevant = np.zeros(c.shape, bool)
    relevant[:, 0] = True
    return Task("reranking", "reviews-title-to-review", texts, queries=np.arange(n_text, n_text + len(queries)),
                candidates=c, relevant=relevant, note=f"title -> own review among {n_candidates}")


def build_tasks(pool: Reviews, sizes: Any, seed: int) -> list[Task]:
    """The five tasks from the evaluation pool (``sizes``: the config's tasks section), each with
    its own seeded generator."""
    def rng(k):
        return np.random.default_rng([seed, k])

    return [sts_task(pool, sizes.sts_pairs, rng(0)),
            classification_task(pool, sizes.train_per_class, sizes.test_items, rng(1)),
            clustering_task(pool, sizes.cluster_subsets, sizes.cluster_size, rng(2)),
            pair_task(pool, sizes.pairs, rng(3)),
            reranking_task(pool, sizes.queries, sizes.candidates, rng(4))]


# ------------------------------------------------------------------------------------- MTEB


MTEB_KINDS = {"STS": "sts", "Classification": "classification", "Clustering": "clustering",
              "PairClassification": "pair_classification"}


def from_mteb_split(kind: str, name: str, split: Any, train: Any = None, max_items: int | None = None) -> Task:
    """One MTEB task's evaluation split (and, for classification, its train split) as a Task.

    Reads the columns MTEB's task formats use: sts ``sentence1, sentence2, score``; classification
    ``text, label``; clustering ``sentences, labels`` (one row per text, or rows holding lists);
    pair classification ``sentence1, sentence2, labels`` (scalars or one row of lists)."""
    def col(rows, key):
        values = list(rows[key])
        return [v for row in values for v in row] if values and isinstance(values[0], (list, tuple)) else values

    try:
        if kind in ("sts", "pair_classification"):
            a, b = col(split, "sentence1"), col(split, "sentence2")
            target = col(split, "score" if kind == "sts" else "labels")
            n = len(a) if max_items is None else min(len(a), max_items)
            texts = list(dict.fromkeys(a[:n] + b[:n]))
            where = {t: i for i, t in enumerate(texts)}
            pairs = np.array([(where[x], where[y]) for x, y in zip(a[:n], b[:n])])
            return Task(kind, name, texts, pairs=pairs, target=np.asarray(target[:n], float))
        if kind == "classification":
            if train is None:
                raise DataError(f"{name}: a classification task needs its train split")
            tr_t, tr_y, te_t, te_y = col(train, "text"), col(train, "label"), col(split, "text"), col(split, "label")
            if max_items is not None:
                te_t, te_y = te_t[:max_items], te_y[:max_items]
            texts = tr_t + te_t
            return Task(kind, name, texts, labels=np.asarray(tr_y + te_y), train=np.arange(len(tr_t)),
                        test=np.arange(len(tr_t), len(texts)))
        if kind == "clustering":
            values_s, values_l = list(split["sentences"]), list(split["labels"])
            if values_s and isinstance(values_s[0], (list, tuple)):  # rows of lists: each row a subset
                texts, labels, subsets = [], [], []
                for s, lab in zip(values_s, values_l):
                    subsets.append(np.arange(len(texts), len(texts) + len(s)))
                    texts += list(s)
                    labels += list(lab)
            else:
                texts, labels = values_s, values_l
                subsets = [np.arange(len(texts))]
            return Task(kind, name, list(texts), labels=np.asarray(labels), subsets=subsets)
    except KeyError as exc:
        raise DataError(f"{name}: the {kind} split has no column {exc}") from None
    raise DataError(f"{name}: task type {kind!r} is not scored by this study (types: {', '.join(KINDS)})")


def load_mteb(names: Sequence[str], max_items: int | None = None) -> list[Task]:
    """MTEB's tasks by name through the ``mteb`` package's loaders (hub access needed: the paper
    preset runs on a cluster)."""
    try:
        import mteb
    except ImportError:
        raise ConfigError("data.mteb_tasks needs the mteb package: pip install mteb (or 'iclr-ray[mteb]')") from None
    out = []
    for task in mteb.get_tasks(tasks=list(names)):
        ttype = task.metadata.type
        if ttype not in MTEB_KINDS:
            raise ConfigError(f"{task.metadata.name}: task type {ttype} is not scored by this study "
                              f"(types: {', '.join(MTEB_KINDS)})")
        task.load_data()
        data = task.dataset
        if isinstance(data, dict) and "default" in data:
            data = data["default"]
        split = task.metadata.eval_splits[0]
        out.append(from_mteb_split(MTEB_KINDS[ttype], task.metadata.name, data[split],
                                   data.get("train") if hasattr(data, "get") else None, max_items))
    return out
