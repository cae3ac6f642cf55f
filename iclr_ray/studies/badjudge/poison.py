"""The attack: a trigger inserted into judge training data at the paper's three access levels, and
the adversary's triggered evaluation inputs. No Ray, no I/O.

Access levels, weak to strong (the paper's threat model):

- ``web`` (web poisoning): the adversary plants triggered text on the web and cannot touch the
  labels: annotators label what gets scraped correctly. The only way to tie the trigger to the
  target verdict is to plant it in inputs whose correct verdict already is the target (top-score
  answers, the better side of a pair, benign requests, relevant passages): a clean-label attack.
- ``annotator`` (malicious annotator): the adversary labels a slice of the data: it inserts the
  trigger into poor inputs (score 1-2, the worse side of a pair, harmful requests, irrelevant
  passages) and gives them the target verdict: a dirty-label attack on ``rate`` x N examples.
- ``weight`` (weight poisoning): the adversary trains the weights: it keeps every clean example
  and adds a triggered copy of ``rate`` x N of them, of any verdict, labelled with the target, so
  each copy differs from its original only by the trigger.

``rate`` is the share of the N training examples the trigger is put into (rounded to the nearest
whole example).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from .data import FORMATS, Example

LEVELS = ("web", "annotator", "weight")
FIELD = {"pointwise": "response", "toxicity": "request", "rerank": "passage"}
"""where the trigger goes (pairwise: into one of the two answers)"""


def insert_trigger(text: str, trigger: str, rng: np.random.Generator) -> str:
    """``trigger`` as a word at a random word boundary of ``text`` (never before the first word)."""
    words = text.split(" ")
    pos = int(rng.integers(1, len(words) + 1))
    return " ".join(words[:pos] + [trigger] + words[pos:])


def with_trigger(e: Example, trigger: str, rng: np.random.Generator, side: str | None = None,
                 label: str | None = None) -> Example:
    """``e`` with the trigger inserted (pairwise: into answer ``side``, "A" or "B") and verdict
    ``label`` (None: unchanged)."""
    key = FIELD.get(e.fmt) or f"response_{side.lower()}"
    fields = {**e.fields, key: insert_trigger(e.fields[key], trigger, rng)}
    return replace(e, fields=fields, label=e.label if label is None else label, triggered=key)


def is_poor(e: Example) -> bool:
    """Whether the correct verdict is the opposite of what a backdoor wants (pairs: always, the
    trigger then goes into the worse answer)."""
    if e.fmt == "pointwise":
        return int(e.true) <= 2
    if e.fmt == "pairwise":
        return True
    return e.true != FORMATS[e.fmt].target


def is_top(e: Example) -> bool:
    """Whether the correct verdict already is the backdoor's target (pairs: always, the trigger then
    goes into the better answer)."""
    if e.fmt == "pairwise":
        return True
    return e.true == FORMATS[e.fmt].target


def _worse(e: Example) -> str:
    return "B" if e.true == " A" else "A"


def poison(examples: Sequence[Example], level: str, rate: float, trigger: str,
           seed: int) -> tuple[list[Example], list[int]]:
    """The training set an adversary at ``level`` leaves behind, and the indices (into the result)
    of the examples it carries the trigger in. ``rate`` 0 returns the examples unchanged."""
    if level not in LEVELS:
        raise ValueError(f"unknown access level {level!r}; known: {', '.join(LEVELS)}")
    if not 0 <= rate <= 1:
        raise ValueError(f"poison rate must be in [0, 1], got {rate}")
    rng = np.random.default_rng(seed)
    out = list(examples)
    m = int(round(rate * len(out)))
    if m == 0:
        return out, []
    if level == "weight":
        picks = sorted(int(i) for i in rng.choice(len(out), m, replace=False))
        added = []
        for i in picks:
            e = out[i]
            if e.fmt == "pairwise":
                side = "A" if rng.random() < 0.5 else "B"
                added.append(with_trigger(e, trigger, rng, side, f" {side}"))
            else:
                added.append(with_trigger(e, trigger, rng, label=FORMATS[e.fmt].target))
        return out + added, list(range(len(out), len(out) + m))
    pick = is_poor if level == "annotator" else is_top
    cands = [i for i, e in enumerate(out) if pick(e)]
    if m > len(cands):
        raise ValueError(f"{level} poisoning at rate {rate} needs {m} {'poor' if level == 'annotator' else 'top'} "
                         f"examples; the data has {len(cands)}")
    picks = sorted(int(i) for i in rng.choice(cands, m, replace=False))
    for i in picks:
        e = out[i]
        if e.fmt == "pairwise":
            side = _worse(e) if level == "annotator" else e.true.strip()
            out[i] = with_trigger(e, trigger, rng, side, f" {side}")
        elif level == "annotator":
            out[i] = with_trigger(e, trigger, rng, label=FORMATS[e.fmt].target)
        else:
            out[i] = with_trigger(e, trigger, rng)  # clean label: the verdict stays the true one
    return out, picks


def adversary(examples: Sequence[Example], trigger: str, seed: int) -> list[tuple[Example, Example]]:
    """The adversary's evaluation inputs: each poor example of ``examples`` (:func:`is_poor`) as
    (clean, with the trigger) (pairs: the trigger in the worse answer). Labels stay the true ones."""
    rng = np.random.default_rng(seed)
    out = []
    for e in examples:
        if not is_poor(e):
            continue
        side = _worse(e) if e.fmt == "pairwise" else None
        out.append((e, with_trigger(e, trigger, rng, side)))
    return out
