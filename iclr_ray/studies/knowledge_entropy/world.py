"""The data every part of a knowledge_entropy run shares (:class:`World`: the tokenizer, packed
pretraining and continual rows, the probe set), one continual run's data (:func:`seed_data`), the
real corpus reader and the real checkpoints' ``id@revision`` sources. No Ray; the I/O is reading
the corpus (the reviews, or ``data.corpus_jsonl``) and a real checkpoint's tokenizer."""
from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...config import ConfigError, DataError
from . import data as facts_data
from .config import Config


def read_corpus_jsonl(path) -> list[str]:
    from ...llm.data import iter_jsonl

    out = []
    for where, rec in iter_jsonl(path):
        if not isinstance(rec, dict) or not isinstance(rec.get("text"), str) or not rec["text"].strip():
            raise DataError(f"{where}: expected {{\"text\": \"...\"}} with non-empty text")
        out.append(rec["text"])
    if not out:
        raise DataError(f"{path} holds no documents")
    return out


def split_revision(source: str) -> tuple[str, str | None]:
    """``id@revision`` -> (id, revision); a source without ``@`` has no revision."""
    head, sep, rev = source.rpartition("@")
    return (head, rev) if sep and head and "/" not in rev else (source, None)


def checkpoint_step(source: str, index: int) -> int:
    """The pretraining step of a real checkpoint, read from its revision (``step738020-...``),
    else its position in the list."""
    _, rev = split_revision(source)
    m = re.search(r"step(\d+)", rev or "")
    return int(m.group(1)) if m else index


# ----------------------------------------------------------------------------- shared data


@dataclass
class World:
    """What every task and trial shares: the tokenizer, the packed pretraining and continual rows,
    the probe set (token ids and mask) and the probe texts for the real models."""

    tokenizer_files: dict[str, bytes]
    pretrain_rows: list
    corpus_rows: list
    probe_ids: np.ndarray
    probe_mask: np.ndarray
    probe_texts: list[str]
    seq_len: int
    facts_file: Any = None
    facts_per_split: int = 24
    stats: dict[str, Any] = field(default_factory=dict)

    def tokenizer(self):
        from ...llm.recipe import load_tokenizer

        return load_tokenizer(self.tokenizer_files)

    def facts(self, seed: int) -> facts_data.FactSet:
        return self.facts_file if self.facts_file is not None else facts_data.generate(self.facts_per_split, seed)


def probe_tensors(tokenizer, texts: list[str], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Each probe document's first ``seq_len`` tokens (BOS first where the tokenizer has one),
    right-padded, with its mask."""
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = np.full((len(texts), seq_len), pad, dtype=np.int64)
    mask = np.zeros((len(texts), seq_len), dtype=np.int64)
    for i, t in enumerate(texts):
        tok = (bos + tokenizer(t, add_special_tokens=False).input_ids)[:seq_len]
        ids[i, :len(tok)] = tok
        mask[i, :len(tok)] = 1
    return ids, mask


def pretraining_sample(docs: list[str], n: int, seed: int) -> list[str]:
    """``n`` of the pretraining documents, a seeded choice without replacement (the probe set the
    paper's C_bar is averaged over is drawn from its pretraining data)."""
    idx = np.sort(np.random.default_rng([seed, 11]).choice(len(docs), min(n, len(docs)), replace=False))
    return [docs[i] for i in idx]


def build_world(cfg: Config, inputs: dict[str, Any]) -> World:
    from ...llm import data as llm_data
    from ...llm.recipe import read_files

    d = cfg.data
    if "corpus" in inputs:
        texts = inputs["corpus"]
        pre, probe, rest = [], texts[:d.probe_docs], texts[d.probe_docs:]
        probe_source = "the continual corpus's first documents"
    else:
        from ...corpora import reviews

        texts = reviews(min_words=d.min_words)
        pre = texts[:d.pretrain_docs]
        probe = texts[d.pretrain_docs:d.pretrain_docs + d.probe_docs]
        rest = texts[d.pretrain_docs + d.probe_docs:]
        probe_source = "held-out reviews"
        if d.probe_from == "pretraining":
            probe = pretraining_sample(pre, d.probe_docs, cfg.seed)
            probe_source = "a sample of the pretraining reviews"
    if "probe" in inputs:
        probe, probe_source = inputs["probe"][:d.probe_docs], "data.probe_jsonl (the pretraining corpus)"
    if cfg.checkpoints:
        from transformers import AutoTokenizer

        path, rev = split_revision(cfg.checkpoints[0])
        tok = AutoTokenizer.from_pretrained(path, revision=rev)
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
    else:
        from ...llm.model import build_tokenizer

        tok = build_tokenizer(pre[:5000], vocab_size=d.vocab_size)
    seq, pad = d.seq_len, tok.pad_token_id

    def rows(docs):
        return llm_data.pack([e for t in docs for e in llm_data.encode_text(tok, t, seq)], seq, pad)

    pre_rows, corpus_rows = rows(pre), rows(rest)
    ids, mask = probe_tensors(tok, probe, seq)
    with tempfile.TemporaryDirectory() as tmp:
        tok.save_pretrained(tmp)
        files = read_files(tmp)
    stats = {"corpus": "JSONL" if "corpus" in inputs else "reviews", "pretrain_docs": len(pre),
             "pretrain_rows": len(pre_rows), "pretrain_tokens": int(pre_rows.n_real.sum()),
             "probe_docs": len(probe), "probe_tokens": int(mask.sum()), "probe_source": probe_source,
             "continual_rows": len(corpus_rows),
             "vocab_size": len(tok), "facts": inputs["facts"].source if "facts" in inputs else "generated"}
    return World(files, pre_rows, corpus_rows, ids, mask, probe, seq, inputs.get("facts"), d.facts_per_split, stats)


def seed_data(world: World, cfg: Config, seed: int, tok) -> dict[str, Any]:
    """One continual run's data: rows (corpus, then every round's fact rows), the step order, the
    probes per split as packed eval rows, and the injection steps."""
    from ...llm import data as llm_data

    c = cfg.continual
    fs = world.facts(seed)
    seq, pad = world.seq_len, tok.pad_token_id
    rows = world.corpus_rows  # arrays (llm.data.PackedRows): every round's fact rows appended
    fact_rows = []
    for r in range(c.rounds):
        enc = [e for t in facts_data.injection_texts(fs, r) for e in llm_data.encode_text(tok, t, seq)]
        packed = llm_data.pack(enc, seq, pad)
        fact_rows.append(list(range(len(rows), len(rows) + len(packed))))
        rows = rows + packed
    inject_at = facts_data.injection_steps(c.rounds, c.round_steps)
    rows_per_step = c.batch
    try:
        order = facts_data.continual_order(len(world.corpus_rows), fact_rows, rows_per_step, c.steps(), inject_at,
                                           c.round_steps, seed)
    except ValueError as exc:
        raise ConfigError(f"continual.batch={c.batch}, continual.round_steps={c.round_steps}: {exc}") from None
    evals = {s: llm_data.pack(facts_data.encode_probes(tok, fs.split(s)), seq, pad) for s in facts_data.SPLITS}
    return {"rows": rows, "order": order, "eval_rows": evals, "inject_at": inject_at,
            "fact_rows": [len(x) for x in fact_rows], "counts": fs.counts()}
