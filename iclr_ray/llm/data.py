"""Chat data for supervised fine-tuning: JSONL reading with precise errors, chat-template encoding
with the loss on assistant tokens only, deterministic shuffling, and packing to a token budget.

Packed rows carry ``position_ids`` that restart at 0 for every sample. With no attention mask and
no KV cache (``use_cache=False``, as in training), transformers builds a block-diagonal causal
mask from them, so packed samples never attend to each other (tests/llm check this against
running each sample alone).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from ..config import DataError

IGNORE = -100  # label of tokens that carry no loss (prompt, padding), as torch's cross-entropy expects
ROLES = ("system", "user", "assistant")


def iter_jsonl(path: str | Path) -> Iterator[tuple[str, Any]]:
    """(``"file:line"``, parsed record) for every non-blank line; unreadable files and bad JSON
    are DataErrors naming the place."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{lineno}", json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{lineno}: not valid JSON ({exc.msg}, column {exc.colno})") from None


def read_chat_jsonl(path: str | Path) -> list[list[dict[str, str]]]:
    """Conversations from a JSONL file of ``{"messages": [{"role", "content"}, ...]}`` lines."""
    out = [check_messages(record, where) for where, record in iter_jsonl(path)]
    if not out:
        raise DataError(f"{path} holds no conversations")
    return out


def check_messages(record: Any, where: str) -> list[dict[str, str]]:
    """One conversation, validated: a non-empty list of {role, content} with at least one assistant turn."""
    messages = record.get("messages") if isinstance(record, dict) else None
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: expected an object with a non-empty \"messages\" list")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or set(msg) - {"role", "content"} or "role" not in msg or "content" not in msg:
            raise DataError(f"{where}: message {i} must be {{\"role\": ..., \"content\": ...}}")
        if msg["role"] not in ROLES:
            raise DataError(f"{where}: message {i} has role {msg['role']!r}; expected one of {', '.join(ROLES)}")
        if not isinstance(msg["content"], str):
            raise DataError(f"{where}: message {i} content must be a string")
    if not any(m["role"] == "assistant" for m in messages):
        raise DataError(f"{where}: no assistant message, so nothing to learn from")
    return [dict(m) for m in messages]


@dataclass
class Encoded:
    input_ids: list[int]
    labels: list[int]

    def __len__(self) -> int:
        return len(self.input_ids)


def encode_chat(tokenizer, messages: Sequence[dict[str, str]]) -> Encoded:
    """Token ids of the rendered chat template, labels equal to the ids on assistant turns (their
    content and end marker, not the role header a generation prompt supplies) and IGNORE elsewhere.

    Each message is rendered through the tokenizer's own chat template, one at a time, so the ids
    are exactly ``apply_chat_template(messages)``'s and the assistant spans are known exactly.
    """
    ids: list[int] = []
    labels: list[int] = []
    prev = ""
    for i, msg in enumerate(messages):
        rendered = tokenizer.apply_chat_template(list(messages[: i + 1]), tokenize=False)
        if not rendered.startswith(prev):
            raise DataError("the tokenizer's chat template does not render conversations incrementally")
        head = prev
        if msg["role"] == "assistant":  # the header up to where a generation prompt would stop
            prompt = tokenizer.apply_chat_template(list(messages[:i]), tokenize=False, add_generation_prompt=True)
            if rendered.startswith(prompt) and prompt.startswith(prev):
                head = prompt
        head_ids = tokenizer(head[len(prev):], add_special_tokens=False).input_ids
        body_ids = tokenizer(rendered[len(head):], add_special_tokens=False).input_ids
        ids += head_ids + body_ids
        labels += [IGNORE] * len(head_ids) + (body_ids if msg["role"] == "assistant" else [IGNORE] * len(body_ids))
        prev = rendered
    return Encoded(ids, labels)


def encode_all(tokenizer, conversations: Iterable[list[dict[str, str]]], max_tokens: int,
               source: str = "data") -> list[Encoded]:
    """Encode every conversation; one longer than ``max_tokens`` is an error naming it."""
    out = []
    for i, conv in enumerate(conversations, start=1):
        enc = encode_chat(tokenizer, conv)
        if len(enc) > max_tokens:
            raise DataError(f"{source}: conversation {i} has {len(enc)} tokens, over the budget of {max_tokens}")
        out.append(enc)
    return out


def encode_text(tokenizer, text: str, max_tokens: int) -> list[Encoded]:
    """A pre-training document as ``BOS text EOS`` (those the tokenizer has) with every token
    labelled, cut into pieces of at most ``max_tokens`` tokens (so a long document packs instead of
    failing)."""
    bos, eos = ([t] if t is not None else [] for t in (tokenizer.bos_token_id, tokenizer.eos_token_id))
    ids = [*bos, *tokenizer(text, add_special_tokens=False).input_ids, *eos]
    return [Encoded(ids[i:i + max_tokens], ids[i:i + max_tokens]) for i in range(0, len(ids), max_tokens)]


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The sample order of one epoch: a permutation that depends on (seed, epoch) only, so a
    resumed run sees the same data in the same order."""
    return np.random.default_rng([seed, epoch]).permutation(n)


@dataclass
class PackedRow:
    """One packed row (a view into :class:`PackedRows`, or built by hand)."""

    input_ids: Sequence[int]
    labels: Sequence[int]
    position_ids: Sequence[int]
    n_real: int  # tokens that are not padding


@dataclass
class PackedRows:
    """Packed rows as arrays, (rows, tokens) int32 each: what reaches the Ray Train workers (one
    object in Ray's store, read there as zero-copy numpy views, never unpickled into Python ints)
    and what each rank indexes to collate only its own micro-batches. Indexing by a slice or an
    index array gives rows, by an int one :class:`PackedRow`; ``+`` concatenates."""

    input_ids: np.ndarray
    labels: np.ndarray
    position_ids: np.ndarray
    n_real: np.ndarray

    @classmethod
    def empty(cls, width: int) -> "PackedRows":
        z = np.zeros((0, width), np.int32)
        return cls(z, z.copy(), z.copy(), np.zeros(0, np.int32))

    def __len__(self) -> int:
        return len(self.n_real)

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            return PackedRow(self.input_ids[index], self.labels[index], self.position_ids[index],
                             int(self.n_real[index]))
        if isinstance(index, list):
            index = np.asarray(index, dtype=np.int64)
        return PackedRows(self.input_ids[index], self.labels[index], self.position_ids[index], self.n_real[index])

    def __iter__(self) -> Iterator[PackedRow]:
        return (self[i] for i in range(len(self)))

    def __add__(self, other: "PackedRows") -> "PackedRows":
        return PackedRows(*(np.concatenate([a, b]) for a, b in
                            zip((self.input_ids, self.labels, self.position_ids, self.n_real),
                                (other.input_ids, other.labels, other.position_ids, other.n_real))))

    def label_tokens(self) -> int:
        """Tokens that carry a loss after the next-token shift (llm.loss.label_tokens, in numpy)."""
        return int((self.labels[:, 1:] != IGNORE).sum())


def pack(samples: Sequence[Encoded], max_tokens: int, pad_id: int) -> PackedRows:
    """Greedy packing in the given order: samples are appended to a row while they fit, the row
    is padded to ``max_tokens``. Position ids restart at 0 for each sample and for the padding,
    so no token attends across a sample boundary."""
    starts: list[list[int]] = []  # the samples of each row, by index
    used = max_tokens + 1
    for k, s in enumerate(samples):
        if len(s) > max_tokens:
            raise DataError(f"a sample of {len(s)} tokens does not fit the packing budget of {max_tokens}")
        if used + len(s) > max_tokens:
            starts.append([])
            used = 0
        starts[-1].append(k)
        used += len(s)
    rows = len(starts)
    ids = np.full((rows, max_tokens), pad_id, np.int32)
    labels = np.full((rows, max_tokens), IGNORE, np.int32)
    pos = np.tile(np.arange(max_tokens, dtype=np.int32), (rows, 1))
    n_real = np.zeros(rows, np.int32)
    for r, members in enumerate(starts):
        at = 0
        for k in members:
            s = samples[k]
            n = len(s)
            ids[r, at:at + n] = s.input_ids
            labels[r, at:at + n] = s.labels
            pos[r, at:at + n] = np.arange(n)
            at += n
        pos[r, at:] = np.arange(max_tokens - at)  # the padding counts from 0 too
        n_real[r] = at
    return PackedRows(ids, labels, pos, n_real)


def packing_efficiency(rows: PackedRows | Sequence[PackedRow]) -> float:
    """Share of non-padding tokens in the packed rows."""
    if isinstance(rows, PackedRows):
        return float(rows.n_real.sum()) / rows.input_ids.size if len(rows) else 0.0
    total = sum(len(r.input_ids) for r in rows)
    return sum(r.n_real for r in rows) / total if total else 0.0


def collate(rows: PackedRows | Sequence[PackedRow]) -> dict[str, Any]:
    """Packed rows as a batch of torch tensors (no attention mask: position ids delimit samples;
    call the model with ``use_cache=False``)."""
    import torch

    if isinstance(rows, PackedRows):
        # astype copies: the arrays may be read-only views into Ray's object store
        return {k: torch.from_numpy(getattr(rows, k).astype(np.int64)) for k in ("input_ids", "labels", "position_ids")}
    return {
        "input_ids": torch.tensor([r.input_ids for r in rows], dtype=torch.long),
        "labels": torch.tensor([r.labels for r in rows], dtype=torch.long),
        "position_ids": torch.tensor([r.position_ids for r in rows], dtype=torch.long),
    }
