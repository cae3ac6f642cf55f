"""The SFT recipe's measurable parts, as pure functions (no Ray, no I/O): how an effective batch
splits into micro-batches and accumulation, equal-sample budgets, the phased curriculum, the
early-training profile of a run, rank correlations and the scores.

Notation follows the paper: the *effective batch size* is the number of samples per optimiser
step (here packed rows), reached by micro-batches x gradient accumulation x workers; runs are
compared at an equal sample budget; the *early* profile is the mean gradient norm and loss over
the first training rows (the same number of rows, not steps, for every batch size).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np


def batch_split(batch: int, micro_batch_size: int, workers: int) -> tuple[int, int]:
    """(micro-batch size, accumulation steps) with micro x accum x workers == batch; the
    micro-batch is at most ``micro_batch_size``. ValueError when no exact split exists."""
    if batch % workers:
        raise ValueError(f"effective batch {batch} does not split over {workers} workers")
    per_worker = batch // workers
    micro = min(micro_batch_size, per_worker)
    while per_worker % micro:
        micro -= 1
    return micro, per_worker // micro


def steps_for_budget(sample_budget: int, batch: int) -> int:
    """Optimiser steps that spend ``sample_budget`` samples at ``batch`` per step (at least 1)."""
    return max(1, sample_budget // batch)


def phased_order(n_first: int, n_second: int, budget: int, seed: int) -> list[int]:
    """Row indices for phased training on rows ``[0, n_first)`` then ``[n_first, n_first +
    n_second)``: each phase gets the share of ``budget`` its rows have in the data (as many
    samples of each kind as stacked training sees), shuffled per pass with its own seed."""
    first = round(budget * n_first / (n_first + n_second))
    order: list[int] = []
    for offset, n, length, phase in ((0, n_first, first, 0), (n_first, n_second, budget - first, 1)):
        epoch = 0
        part: list[int] = []
        while len(part) < length:
            perm = np.random.default_rng([seed, phase, epoch]).permutation(n)
            part.extend(int(offset + i) for i in perm)
            epoch += 1
        order += part[:length]
    return order


def early_profile(steps: Sequence[dict[str, Any]], window_rows: int) -> tuple[float, float]:
    """(mean grad norm, mean training loss) over the steps whose rows seen (``samples``, counted to
    the end of the step) are at most ``window_rows`` (at least the first step). Counting rows, not
    steps or a share of each trial's own budget, gives every batch size the same window of data."""
    early = [s for s in steps if s["samples"] <= window_rows] or list(steps[:1])
    if not early:
        return math.nan, math.nan
    return float(np.mean([s["grad_norm"] for s in early])), float(np.mean([s["loss"] for s in early]))


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation; NaN when fewer than 3 points or a side is constant."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3 or np.ptp(x[ok]) == 0 or np.ptp(y[ok]) == 0:
        return math.nan
    from scipy import stats  # here, not at import: every Tune trial process imports this module

    return float(stats.spearmanr(x[ok], y[ok]).statistic)


def samples_to_reach(curve: Sequence[tuple[float, float]], target: float) -> float:
    """First sample count at which a (samples, held-out loss) curve is at or below ``target``."""
    for samples, value in curve:
        if value <= target:
            return float(samples)
    return math.inf


def final_score(knowledge: float, skills: float) -> float:
    """The run's evaluation score: the mean of the knowledge score (multiple-choice accuracy, as
    MMLU is scored) and the skills score (exact match of generated answers)."""
    return (knowledge + skills) / 2


def item_string(hits: Sequence[bool]) -> str:
    """Per-item outcomes as a compact string ("1" right, "0" wrong), in the held-out set's order:
    the claims resample held-out items, so every trial keeps which items it got right."""
    return "".join("1" if h else "0" for h in hits)


@dataclass
class HeldOutScorer:
    """A trial's held-out scores of a model: exact match of generated answers per half
    (knowledge, skills), multiple-choice accuracy when there are MC items, and the final score
    (knowledge = MC accuracy if measured, else exact match); with each score its per-item outcomes
    (``<score>_items``, :func:`item_string`). Picklable: the Train worker runs it on the final
    checkpoint."""

    eval_em: dict[str, list[tuple[Any, str]]]
    """per half, (prompt, answer) pairs; a prompt is a user turn or the conversation so far"""
    eval_mc: list[Any]
    """llm.evaluate.MCItem questions (may be empty)"""
    max_new_tokens: int

    def __call__(self, model, tokenizer) -> dict[str, float | str]:
        from ...llm.evaluate import batched_choice_logprobs, exact_match

        out: dict[str, float | str] = {}
        for half, pairs in self.eval_em.items():
            em = exact_match(model, tokenizer, pairs, self.max_new_tokens)
            # per item, by exact_match's own rule (it returns the answers, not the hits)
            hits = [a == ref.strip() for a, (_, ref) in zip(em["answers"], pairs)]
            out[f"{half}_em"], out[f"{half}_em_items"] = em["exact_match"], item_string(hits)
        if self.eval_mc:
            # per item, the choice with the highest summed log-likelihood (mc_accuracy's rule)
            hits = [max(range(len(lp)), key=lambda i: lp[i][0]) == item.answer
                    for item, lp in zip(self.eval_mc, batched_choice_logprobs(model, tokenizer, self.eval_mc))]
            out["knowledge_mc"], out["knowledge_mc_items"] = sum(hits) / len(hits), item_string(hits)
        out["score"] = final_score(out.get("knowledge_mc", out["knowledge_em"]), out["skills_em"])
        return out


def best_by(trials: Sequence[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """The trial with the highest ``key`` (first one on ties), or None."""
    valid = [t for t in trials if t.get(key) is not None and math.isfinite(t[key])]
    return max(valid, key=lambda t: t[key]) if valid else None
