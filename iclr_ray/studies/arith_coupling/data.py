"""Batches for arith_coupling (no Ray, no torch, no I/O): the methods compared, the paper's length
sampling for training, the evaluation grid's cells, and padding into arrays.

A method fixes the format and the positions a model sees:

* ``coupled``: the scratchpad and every level of Position Coupling (2 for addition, 3 for
  multiplication), random offsets in training;
* ``single``: the same scratchpad, only level 1 (significance) of the coupling;
* ``no_scratchpad``: the answer alone after ``=``, with single-level coupling;
* ``absolute``: the scratchpad with absolute learned positions 0, 1, 2, ..., started at a random
  offset in training (random-start APE, as the official baseline);
* ``nope``: the scratchpad with no position information at all.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from . import tasks

TaskName = Literal["addition", "multi_addition", "multiplication"]
MethodName = Literal["coupled", "single", "no_scratchpad", "absolute", "nope"]
METHODS: tuple[str, ...] = ("coupled", "single", "no_scratchpad", "absolute", "nope")


@dataclass(frozen=True)
class Method:
    name: str
    position: str
    """the model's position kind: coupled, absolute or none"""
    levels: int
    scratchpad: bool


def method(task: str, name: str) -> Method:
    full = {"addition": 1, "multi_addition": 2, "multiplication": 3}[task]
    if name == "coupled":
        return Method(name, "coupled", full, True)
    if name == "single":
        return Method(name, "coupled", 1, True)
    if name == "no_scratchpad":
        return Method(name, "coupled", 1, False)
    if name == "absolute":
        return Method(name, "absolute", 1, True)
    if name == "nope":
        return Method(name, "none", 1, True)
    raise ValueError(f"unknown method {name!r}; known: {', '.join(METHODS)}")


def distinct(task: str, name: str) -> bool:
    """False where a method is another one under a different name: two-operand addition has one
    level of coupling and no scratchpad, so ``single`` and ``no_scratchpad`` are ``coupled`` there."""
    return not (task == "addition" and name in ("single", "no_scratchpad"))


def example(task: str, m: Method, digits: list[int] | tuple[int, int], count: int = 2,
            rng: np.random.Generator | None = None, operands: list[int] | None = None) -> tasks.Example:
    """One example of ``task``: multi-operand addition takes ``count`` operands of the given digit
    counts; multiplication and two-operand addition take two (digits = (len A, len B))."""
    rng = rng if rng is not None else np.random.default_rng(0)
    if operands is None:
        operands = [tasks.random_number(rng, int(d)) for d in digits]
    if task == "addition":
        return tasks.addition(*operands)
    if task == "multi_addition":
        return tasks.multi_addition(operands, scratchpad=m.scratchpad)
    return tasks.multiplication(*operands, scratchpad=m.scratchpad)


def train_operands(task: str, rng: np.random.Generator, digits: tuple[int, int], count: tuple[int, int]) -> list[int]:
    """The training distribution: "partially uniform" lengths and a uniform operand count for
    multi-operand addition; independent uniform lengths of the two operands otherwise."""
    if task == "multi_addition":
        return tasks.sample_operands(rng, count, digits)
    lengths = rng.integers(digits[0], digits[1] + 1, size=2)
    return [tasks.random_number(rng, int(n)) for n in lengths]


@dataclass
class Batch:
    tokens: np.ndarray
    """(B, T) token ids, padded with PAD"""
    positions: np.ndarray
    """(B, T, levels) position ids (0 on padding)"""
    loss_mask: np.ndarray
    """(B, T) True on predicted (target) tokens"""
    pad: np.ndarray
    """(B, T) True on padding"""

    def targets(self) -> int:
        return int(self.loss_mask.sum())


def collate(examples: list[tasks.Example], m: Method, max_position: int | None, rng: np.random.Generator | None) -> Batch:
    """Pad examples into arrays. ``max_position`` is the largest id of the method's position table.
    With ``rng`` (training) coupled ids get their random per-level offsets and absolute ids a
    random start, within ``max_position``; without (evaluation) ids are unshifted (``max_position``
    None leaves coupled ids unchecked). Absolute ids are the token index (plus the offset)."""
    T = max(len(e.tokens) for e in examples)
    B = len(examples)
    tok = np.full((B, T), tasks.PAD, dtype=np.int64)
    pos = np.zeros((B, T, m.levels), dtype=np.int64)
    mask = np.zeros((B, T), dtype=bool)
    for i, e in enumerate(examples):
        n = len(e.tokens)
        tok[i, :n] = e.ids()
        mask[i, :n] = e.loss_mask()
        if m.position == "coupled":
            ids = e.positions[:, : m.levels]
            pos[i, :n] = ids if max_position is None else tasks.shifted(ids, max_position, rng)
        elif m.position == "absolute":
            pos[i, :n] = tasks.absolute(n, max_position, rng)
    return Batch(tok, pos, mask, tok == tasks.PAD)


def train_batch(task: str, m: Method, size: int, rng: np.random.Generator, digits: tuple[int, int],
                count: tuple[int, int], max_position: int) -> Batch:
    """``size`` training examples; ``max_position``: the largest id of the method's position table
    (the task's max_position for coupled ids, the longest evaluated sequence for absolute ones)."""
    exs = [example(task, m, (), operands=train_operands(task, rng, digits, count)) for _ in range(size)]
    return collate(exs, m, max_position, rng)


def eval_cell(task: str, m: Method, digits: int, count: int, size: int, seed: int,
              offsets_within: int | None = None) -> Batch:
    """One cell of the evaluation grid: ``size`` examples whose operands all have exactly
    ``digits`` digits (multi-operand: ``count`` operands; multiplication: digits = len A and
    count = len B), the same numbers for every method (the seed fixes them). The ids are those of
    evaluation (no offset, the official evaluation) unless ``offsets_within`` is given: then each
    example gets random offsets as in training, within that largest id (seeded, a check)."""
    rng = np.random.default_rng([seed, digits, count])
    if task == "multiplication":
        lengths = [digits, count]
    elif task == "addition":
        lengths = [digits, digits]
    else:
        lengths = [digits] * count
    exs = [example(task, m, lengths, rng=rng) for _ in range(size)]
    if offsets_within is not None:
        return collate(exs, m, offsets_within, np.random.default_rng([seed, digits, count, 1]))
    return collate(exs, m, max_position=None, rng=None)


def longest(task: str, m: Method, digits: int, count: int) -> tuple[int, int]:
    """(tokens, largest position id) of the longest example of a cell: sizes the tables."""
    lengths = [digits, count] if task == "multiplication" else [digits] * (2 if task == "addition" else count)
    e = example(task, m, lengths, operands=[10**n - 1 for n in lengths])  # all nines: the widest sums
    return len(e.tokens), int(e.positions[:, : m.levels].max())
