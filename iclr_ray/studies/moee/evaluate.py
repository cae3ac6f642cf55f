"""Scoring an embedding view on a task, as MTEB scores its task types, per unit (a pair, a test
item, a clustering subset, a query) so that the claims can resample the units. numpy, scipy and
scikit-learn: no Ray, no I/O.

How MoEE (sum) enters each task type (the paper's "similarity ensemble"):
- similarity tasks (STS, reranking): cos(HS) + alpha cos(RW), as the dot product of
  :func:`moee.sum_embedding`;
- pair classification: each of MTEB's similarity measures (cosine, Manhattan, Euclidean) summed
  over the two parts with weight alpha, the best measure's average precision reported (MTEB's max);
- classification: the class probabilities of a classifier on HS and one on RW, p_HS + alpha p_RW
  (the paper's "the two predictions averaged with weight alpha"; its repository averages the two
  predicted label *ids*, which is not a similarity ensemble and not what is done here);
- clustering: k-means under the sum similarity, i.e. on :func:`moee.sum_embedding` (the repository
  averages the two k-means runs' cluster *ids*, whose numbering is arbitrary; not done here).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .data import Task
from .moee import Views

MEASURES = ("cosine", "manhattan", "euclidean")


def _pair_measures(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, 3) similarities of row-aligned unit vectors: cosine, -Manhattan, -Euclidean."""
    return np.stack([np.sum(a * b, 1), -np.abs(a - b).sum(1), -np.linalg.norm(a - b, axis=1)], 1)


def pair_scores(views: Views, pairs: np.ndarray, view: str, alpha: float) -> np.ndarray:
    """(n, 3) similarity measures of each pair under ``view``; for the sum, each measure of HS plus
    alpha times the same measure of RW."""
    a, b = pairs[:, 0], pairs[:, 1]
    if view == "sum":
        hs, rw = views.get("hs"), views.get("rw")
        return _pair_measures(hs[a], hs[b]) + alpha * _pair_measures(rw[a], rw[b])
    emb = views.get(view)
    return _pair_measures(emb[a], emb[b])


def classify(views: Views, task: Task, view: str, alpha: float, seed: int = 0) -> np.ndarray:
    """1.0 where the test item's class is predicted right (logistic regression, MTEB's settings:
    lbfgs, 100 iterations), else 0.0."""
    from sklearn.linear_model import LogisticRegression

    def proba(emb):
        clf = LogisticRegression(max_iter=100, random_state=seed)
        clf.fit(emb[task.train], task.labels[task.train])
        return clf.predict_proba(emb[task.test]), clf.classes_

    if view == "sum":
        (p_hs, classes), (p_rw, _) = proba(views.get("hs")), proba(views.get("rw"))
        p = p_hs + alpha * p_rw
    else:
        p, classes = proba(views.get(view, alpha))
    return (classes[p.argmax(1)] == task.labels[task.test]).astype(float)


def cluster(views: Views, task: Task, view: str, alpha: float, seed: int = 0) -> np.ndarray:
    """V-measure of mini-batch k-means (MTEB's: batch 500, k = the subset's classes) per subset."""
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.metrics import v_measure_score

    emb = views.get(view, alpha)
    out = []
    for idx in task.subsets:
        labels = task.labels[idx]
        km = MiniBatchKMeans(n_clusters=len(np.unique(labels)), batch_size=500, n_init=3, random_state=seed)
        out.append(v_measure_score(labels, km.fit_predict(emb[idx])))
    return np.array(out)


def average_precision(scores: np.ndarray, relevant: np.ndarray) -> float:
    """Average precision of ``scores`` ranking the ``relevant`` items first (ties broken by order)."""
    order = np.argsort(-scores, kind="stable")
    rel = relevant[order].astype(float)
    if rel.sum() == 0:
        return float("nan")
    hits = np.cumsum(rel)
    return float(np.sum(rel * hits / np.arange(1, len(rel) + 1)) / rel.sum())


def rerank(views: Views, task: Task, view: str, alpha: float) -> np.ndarray:
    """Average precision of each query's candidates ranked by similarity."""
    emb = views.get(view, alpha)
    sims = np.einsum("qd,qmd->qm", emb[task.queries], emb[task.candidates])
    return np.array([average_precision(s, r) for s, r in zip(sims, task.relevant)])


def score_units(task: Task, views: Views, view: str, alpha: float = 1.0, seed: int = 0) -> np.ndarray:
    """The per-unit values of ``view`` on ``task``: similarities of the pairs (STS: (n,), pair
    classification: (n, 3)), correct test predictions, V-measure per subset, AP per query."""
    if task.kind == "sts":
        return pair_scores(views, task.pairs, view, alpha)[:, 0]
    if task.kind == "pair_classification":
        return pair_scores(views, task.pairs, view, alpha)
    if task.kind == "classification":
        return classify(views, task, view, alpha, seed)
    if task.kind == "clustering":
        return cluster(views, task, view, alpha, seed)
    if task.kind == "reranking":
        return rerank(views, task, view, alpha)
    raise ValueError(f"unknown task kind {task.kind!r}")


def _spearman(values: np.ndarray, target: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(values, target).statistic)


def _best_ap(values: np.ndarray, target: np.ndarray) -> float:
    return max(average_precision(values[:, m], target > 0) for m in range(values.shape[1]))


def _mean(values: np.ndarray, target=None) -> float:
    return float(np.nanmean(values))


STATISTICS: dict[str, Callable[..., float]] = {
    "sts": _spearman, "pair_classification": _best_ap, "classification": _mean, "clustering": _mean,
    "reranking": _mean}
"""the task score from its units (and the task's targets, resampled with them): Spearman x 1,
best AP, accuracy, mean V-measure, MAP (all in [0, 1] or [-1, 1]; reported x 100 as MTEB does)"""


def task_score(kind: str, values: np.ndarray, target: np.ndarray | None = None) -> float:
    return STATISTICS[kind](np.asarray(values), None if target is None else np.asarray(target))
