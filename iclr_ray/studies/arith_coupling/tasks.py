"""Arithmetic tasks with scratchpads and multi-level Position Coupling (no Ray, no torch, no I/O):
Cho, Cha, Bhojanapalli, Yun, "Arithmetic Transformers Can Length-Generalize in Both Operand Length
and Count" (ICLR 2025), and its predecessor Position Coupling (NeurIPS 2024).

A sequence is ``<eos> prompt = target <eos>`` (the start token is the end token, as in the
official code); the loss covers everything after the first ``=``. Every token carries one position
id per level. Ids are stored as they are at evaluation (each level starts at 1; 0 means "no
position at this level" and never moves); in training each level's non-zero ids are shifted by
one random offset per sample, so the model sees every absolute id but only relative structure
repeats.

* Two-operand addition: operands zero-padded to the longer one, the sum padded one digit more
  and written least-significant first. One level: digit significance; ``+`` and ``=`` get 1.
* Multi-operand addition with the running-sum scratchpad: operands (not reversed) and running
  sums (reversed, starting from 0) all zero-padded to the width P of the largest possible sum.
  Level 1 = significance (shared by operands and sums; separators get 1); level 2 = operand index,
  shared by operand k and the running sum it is added to (sum 0 is the padded 0), as in the
  official code.
* The absolute-position baseline: ids 0, 1, 2, ... over the whole sequence; in training the run
  starts at a random offset (the official "random-start APE"), so the table's rows past the
  training lengths are trained too.
* N x M multiplication: the partial products A * b_i (B's digits from the units; reversed, padded
  to len(A) + 1), then the shifted running sums (reversed, padded to len(A) + len(B)). Level 1 =
  significance within A (and within each partial product), level 2 = the digit of B a row belongs
  to, level 3 = significance in the output (partial product i is shifted by i).
* Without the scratchpad: the answer alone after ``=``, with one level of coupling.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VOCAB: tuple[str, ...] = ("<pad>", "<eos>", *"0123456789", "+", "*", "=", ">")
TOKEN_ID = {t: i for i, t in enumerate(VOCAB)}
PAD, EOS = TOKEN_ID["<pad>"], TOKEN_ID["<eos>"]


@dataclass(frozen=True)
class Example:
    tokens: tuple[str, ...]
    positions: np.ndarray
    """(len(tokens), levels) int: the ids at evaluation (each level starts at 1, 0 = none)"""
    target_start: int
    """index of the first target token (the one after the first "=")"""
    answer: str
    """the final result as a decimal string (most significant digit first)"""

    @property
    def levels(self) -> int:
        return self.positions.shape[1]

    def ids(self) -> np.ndarray:
        return np.array([TOKEN_ID[t] for t in self.tokens], dtype=np.int64)

    def loss_mask(self) -> np.ndarray:
        """True where a token is predicted (the target: scratchpad, answer, final <eos>)."""
        m = np.zeros(len(self.tokens), dtype=bool)
        m[self.target_start:] = True
        return m


class _Builder:
    """Appends tokens with their per-level ids."""

    def __init__(self, levels: int):
        self.tokens: list[str] = ["<eos>"]
        self.pos: list[tuple[int, ...]] = [(0,) * levels]
        self.levels = levels
        self.target_start = -1

    def add(self, token: str, *ids: int) -> None:
        assert len(ids) == self.levels
        self.tokens.append(token)
        self.pos.append(ids)

    def digits(self, text: str, *ids_per_digit) -> None:
        """text[k] gets ids_per_digit[level][k]."""
        for k, ch in enumerate(text):
            self.add(ch, *(ids[k] for ids in ids_per_digit))

    def start_target(self) -> None:
        self.target_start = len(self.tokens)

    def build(self, answer: str) -> Example:
        self.add("<eos>", *(0,) * self.levels)
        return Example(tuple(self.tokens), np.array(self.pos, dtype=np.int64), self.target_start, answer)


def _rev(n: int, width: int) -> str:
    return str(n).zfill(width)[::-1]


def _check(operands: list[int]) -> None:
    if any(not isinstance(a, (int, np.integer)) or a < 0 for a in operands):
        raise ValueError(f"operands must be non-negative integers, got {operands}")


def addition(a: int, b: int) -> Example:
    """``<eos> a + b = rev(a + b) <eos>``, single-level coupling."""
    _check([a, b])
    L = max(len(str(a)), len(str(b)))
    out = _Builder(1)
    for k, x in enumerate((a, b)):
        if k:
            out.add("+", 1)
        out.digits(str(x).zfill(L), range(L + 1, 1, -1))
    out.add("=", 1)
    out.start_target()
    out.digits(_rev(a + b, L + 1), range(2, L + 3))
    return out.build(str(a + b))


def sum_width(operands: list[int]) -> int:
    """P: the digits of the largest sum of len(operands) numbers as long as the longest operand."""
    L = max(len(str(x)) for x in operands)
    return len(str((10**L - 1) * len(operands)))


def multi_addition(operands: list[int], scratchpad: bool = True) -> Example:
    """``<eos> a_1 + ... + a_n = 0 > rev(a_1) > rev(a_1 + a_2) > ... <eos>`` (2 levels), or without the
    scratchpad ``... = rev(sum) <eos>`` (1 level)."""
    _check(operands)
    if len(operands) < 2:
        raise ValueError("multi-operand addition needs at least 2 operands")
    P = sum_width(operands)
    sig = range(P + 1, 1, -1)  # level 1 of an operand: most significant digit highest
    out = _Builder(2 if scratchpad else 1)
    for k, x in enumerate(operands):
        ids = (sig, [k + 1] * P) if scratchpad else (sig,)
        out.digits(str(x).zfill(P), *ids)
        if k < len(operands) - 1:
            out.add("+", *((1, k + 1) if scratchpad else (1,)))
    total = sum(operands)
    if not scratchpad:
        out.add("=", 1)
        out.start_target()
        out.digits(_rev(total, P), range(2, P + 2))
        return out.build(str(total))
    running = 0
    for j in range(len(operands) + 1):  # sum j = operands 0..j-1; operand j is added to it
        out.add("=" if j == 0 else ">", 1, j + 1)
        if j == 0:
            out.start_target()
        else:
            running += operands[j - 1]
        out.digits(_rev(running, P), range(2, P + 2), [j + 1] * P)
    return out.build(str(total))


def multiplication(a: int, b: int, scratchpad: bool = True) -> Example:
    """``<eos> A * B = rev(A b_1) + rev(A b_2) ... = rev(S_1) > rev(S_2) ... <eos>`` (3 levels), where b_i
    runs over B's digits from the units and S_i = sum_{i' <= i} A b_i' 10^(i'-1); or without the
    scratchpad ``A * B = rev(A B)`` (1 level: A's significance, B's, the product's)."""
    _check([a, b])
    sa, sb = str(a), str(b)
    la, lb = len(sa), len(sb)
    width = la + lb
    if not scratchpad:
        out = _Builder(1)
        out.digits(sa, range(la + 1, 1, -1))
        out.add("*", 1)
        out.digits(sb, range(lb + 1, 1, -1))
        out.add("=", 1)
        out.start_target()
        out.digits(_rev(a * b, width), range(2, width + 2))
        return out.build(str(a * b))
    out = _Builder(3)
    out.digits(sa, range(la + 1, 1, -1), [0] * la, [0] * la)
    out.add("*", 0, 0, 0)
    out.digits(sb, [0] * lb, range(lb, 0, -1), [0] * lb)  # B's units digit is row 1
    digits_b = [int(c) for c in reversed(sb)]
    for i, bi in enumerate(digits_b, start=1):
        out.add("=" if i == 1 else "+", 1, i, i)
        if i == 1:
            out.start_target()
        out.digits(_rev(a * bi, la + 1), range(2, la + 3), [i] * (la + 1), range(i + 1, i + la + 2))
    running = 0
    for i, bi in enumerate(digits_b, start=1):
        running += a * bi * 10 ** (i - 1)
        out.add("=" if i == 1 else ">", 0, i, 1)
        out.digits(_rev(running, width), [0] * width, [i] * width, range(2, width + 2))
    return out.build(str(a * b))


def shifted(positions: np.ndarray, max_position: tuple[int, ...] | int, rng: np.random.Generator | None) -> np.ndarray:
    """The training ids: each level's non-zero ids moved by one offset drawn uniformly so that the
    largest id stays <= max_position (ids lie in [0, max_position], a table of max_position + 1
    rows). ``rng=None`` gives the evaluation ids unchanged."""
    levels = positions.shape[1]
    caps = (max_position,) * levels if isinstance(max_position, int) else tuple(max_position)
    top = positions.max(axis=0)
    if (top > np.array(caps)).any():
        raise ValueError(f"position ids up to {top.tolist()} exceed max_position {list(caps)}")
    if rng is None:
        return positions.copy()
    shift = np.array([rng.integers(0, cap - t + 1) for cap, t in zip(caps, top)])
    return np.where(positions > 0, positions + shift, 0)


def absolute(n_tokens: int, max_position: int | None = None, rng: np.random.Generator | None = None) -> np.ndarray:
    """The absolute-position baseline's ids (one level): 0, 1, 2, ... at evaluation; in training
    (``rng`` given) the whole run moved by one start offset drawn uniformly so the last id stays
    <= ``max_position``. That is the official code's "random-start APE" baseline (its ``vanilla``
    positions, start drawn per sample with ``randomize``): every row of the table up to
    ``max_position`` is trained, not only the rows of the training lengths."""
    ids = np.arange(n_tokens, dtype=np.int64)[:, None]
    if rng is None:
        return ids
    if max_position is None or n_tokens - 1 > max_position:
        raise ValueError(f"{n_tokens} tokens do not fit absolute ids up to max_position {max_position}")
    return ids + int(rng.integers(0, max_position - (n_tokens - 1) + 1))


def random_number(rng: np.random.Generator, digits: int) -> int:
    """A uniform number with exactly ``digits`` digits (a 1-digit number may be 0)."""
    if digits == 1:
        return int(rng.integers(0, 10))
    if digits > 18:  # past int64: the remaining digits one at a time (uniform all the same)
        rest = int("".join(str(int(x)) for x in rng.integers(0, 10, size=digits - 1)))
    else:
        rest = int(rng.integers(0, 10 ** (digits - 1)))
    return int(rng.integers(1, 10)) * 10 ** (digits - 1) + rest


def sample_operands(rng: np.random.Generator, count: tuple[int, int], digits: tuple[int, int],
                    shared_length_p: float = 0.5) -> list[int]:
    """The paper's "partially uniform" sampling: operand count uniform in ``count``; with
    probability 1 - shared_length_p each operand's length is uniform in ``digits``, otherwise all
    operands share one length drawn from it."""
    n = int(rng.integers(count[0], count[1] + 1))
    if rng.random() < shared_length_p:
        lengths = [int(rng.integers(digits[0], digits[1] + 1))] * n
    else:
        lengths = [int(x) for x in rng.integers(digits[0], digits[1] + 1, size=n)]
    return [random_number(rng, L) for L in lengths]
