"""Data of the knowledge_entropy study: fictional facts to inject (generated, or read from a JSONL
file), their probes, and the step schedule of a continual run that injects them.

A fact set has three splits, after the paper's fictional-knowledge protocol (Chang et al. 2024):

* ``paraphrase``: each fact is injected at every injection round, in a different paraphrase each
  time (its ``train`` texts, one per round, cycled);
* ``once``: each fact is injected once, in the first round;
* ``unseen``: never injected. Their probes measure what continual training alone does to the log
  probability of such facts (new names, new cities): the control that acquisition is measured
  against.

A probe is (prompt, target): the model reads the prompt and the target's log probability is what
counts. Generated facts are people with made-up names, a made-up home town and a trade; the probes
are the memorisation probes of the paper (the first injected sentence, cut before the attribute).

The JSONL format (``data.facts_jsonl``), one fact per line::

    {"split": "paraphrase", "train": ["text 1", "text 2", ...], "probes": [{"prompt": "...", "target": "..."}]}

No Ray, no I/O apart from reading that file.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ...config import DataError

SPLITS = ("paraphrase", "once", "unseen")
INJECTED = ("paraphrase", "once")

_ONSETS = ["b", "br", "d", "dr", "f", "g", "gr", "k", "kl", "l", "m", "n", "p", "pr", "r", "s", "st", "t", "th", "v",
           "z", "sh", "c", "h", "j"]
_VOWELS = ["a", "e", "i", "o", "u", "ae", "ia", "ou", "ei"]
_CODAS = ["", "", "n", "r", "l", "s", "th", "m", "nd", "x"]
TRADES = ["baker", "tailor", "potter", "weaver", "carpenter", "fisher", "miller", "mason", "brewer", "glassblower",
          "cartographer", "beekeeper", "blacksmith", "bookbinder", "shepherd", "locksmith", "clockmaker", "sailor",
          "herbalist", "stonecutter"]

# (train paraphrases, one per injection round) and the probes, written with {name} {city} {trade}
PARAPHRASES = [
    "{name} lives in {city} and works as a {trade}.",
    "{name} is a {trade} whose home is the town of {city}.",
    "In the town of {city} lives {name}, who earns a living as a {trade}.",
    "People in {city} know {name} as the local {trade}.",
    "{name}, a {trade} by trade, has always lived in {city}.",
]
PROBES = [("{name} lives in", " {city}"), ("{name} lives in {city} and works as a", " {trade}")]


@dataclass
class Fact:
    split: str
    train: list[str]
    """the texts injected, one per round (cycled); a ``once`` fact uses only the first"""
    probes: list[tuple[str, str]]
    """(prompt, target) pairs"""


@dataclass
class FactSet:
    facts: list[Fact]
    source: str = "generated"
    notes: dict[str, Any] = field(default_factory=dict)

    def split(self, name: str) -> list[Fact]:
        return [f for f in self.facts if f.split == name]

    def counts(self) -> dict[str, int]:
        return {s: len(self.split(s)) for s in SPLITS}


def _word(rng: random.Random, syllables: int) -> str:
    w = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)) + rng.choice(_CODAS)
    return w.capitalize()


def generate(per_split: int, seed: int) -> FactSet:
    """``per_split`` fictional people per split, all with distinct names (seeded): a two-part
    made-up name, a made-up home town (towns may repeat across people, names do not), a trade."""
    rng = random.Random(f"knowledge_entropy:facts:{seed}")
    towns = sorted({_word(rng, rng.choice((2, 3))) for _ in range(max(8, per_split))})
    names: set[str] = set()
    facts = []
    for split in SPLITS:
        for _ in range(per_split):
            name = f"{_word(rng, 2)} {_word(rng, rng.choice((2, 3)))}"
            while name in names:
                name = f"{_word(rng, 2)} {_word(rng, 3)}"
            names.add(name)
            values = {"name": name, "city": rng.choice(towns), "trade": rng.choice(TRADES)}
            train = [t.format(**values) for t in PARAPHRASES]
            probes = [(p.format(**values), t.format(**values)) for p, t in PROBES]
            facts.append(Fact(split, train if split == "paraphrase" else train[:1], probes))
    return FactSet(facts)


def read_facts_jsonl(path: str | Path) -> FactSet:
    """A fact set from the JSONL format in the module docstring; DataError naming file:line."""
    from ...llm.data import iter_jsonl

    facts = []
    for where, rec in iter_jsonl(path):
        if not isinstance(rec, dict) or set(rec) - {"split", "train", "probes"}:
            raise DataError(f"{where}: expected an object with keys split, train, probes")
        split = rec.get("split")
        if split not in SPLITS:
            raise DataError(f"{where}: split must be one of {', '.join(SPLITS)}, got {split!r}")
        train = rec.get("train", [])
        if not isinstance(train, list) or not all(isinstance(t, str) and t.strip() for t in train):
            raise DataError(f"{where}: train must be a list of non-empty strings")
        if split in INJECTED and not train:
            raise DataError(f"{where}: a {split} fact needs at least one train text (it is injected)")
        probes = rec.get("probes")
        if not isinstance(probes, list) or not probes:
            raise DataError(f"{where}: probes must be a non-empty list of {{\"prompt\", \"target\"}}")
        pairs = []
        for i, p in enumerate(probes):
            if not isinstance(p, dict) or set(p) != {"prompt", "target"} or not all(
                    isinstance(p[k], str) and p[k] for k in ("prompt", "target")):
                raise DataError(f"{where}: probe {i} must be {{\"prompt\": str, \"target\": str}}, both non-empty")
            pairs.append((p["prompt"], p["target"]))
        facts.append(Fact(split, list(train), pairs))
    fs = FactSet(facts, source=str(path))
    empty = [s for s, n in fs.counts().items() if n == 0]
    if empty:
        raise DataError(f"{path}: no {' or '.join(empty)} facts; every split is needed (unseen facts are the "
                        "control that acquisition is measured against)")
    return fs


OFFICIAL_PROBES = {"memorization": ("mem_input", "mem_target"), "semantic": ("gen_input", "gen_target"),
                   "composition": ("hard_gen_input", "hard_gen_target")}
"""the official fictional-knowledge entries' probe fields, by the paper's probe kinds"""


def _official_entries(path: str | Path) -> list[dict[str, Any]]:
    import json

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from None
    if not isinstance(data, list) or not data:
        raise DataError(f"{path}: expected a non-empty JSON list of fictional-knowledge entries")
    return data


def _official_fact(path, i: int, entry: Any, split: str, probe_kind: str) -> Fact:
    where = f"{path}: entry {i}"
    if not isinstance(entry, dict):
        raise DataError(f"{where}: expected an object")
    context = entry.get("train_context")
    if not isinstance(context, str) or not context.strip():
        raise DataError(f"{where}: train_context must be a non-empty string")
    paraphrases = entry.get("paraphrases", [])
    if not isinstance(paraphrases, list) or not all(isinstance(p, str) and p.strip() for p in paraphrases):
        raise DataError(f"{where}: paraphrases must be a list of non-empty strings")
    inputs, targets = (entry.get(k) for k in OFFICIAL_PROBES[probe_kind])
    if not (isinstance(inputs, list) and isinstance(targets, list) and inputs and len(inputs) == len(targets)
            and all(isinstance(x, str) and x.strip() for x in inputs + targets)):
        raise DataError(f"{where}: {' and '.join(OFFICIAL_PROBES[probe_kind])} must be equally long lists of "
                        "non-empty strings")
    # the target follows its prompt after a space, as the official probes are read
    probes = [(p.rstrip(), " " + t.strip()) for p, t in zip(inputs, targets)]
    train = [context, *paraphrases] if split == "paraphrase" else [context]
    return Fact(split, train, probes)


def read_official_facts(paraphrase_file: str | Path, once_file: str | Path, unseen: int = 20,
                        probe_kind: str = "memorization") -> FactSet:
    """The official fictional-knowledge set (the paper's Section 4 data, Chang et al. 2024's format:
    a JSON list of entries with ``train_context``, ``paraphrases`` and the ``mem_``/``gen_``/
    ``hard_gen_`` ``input``/``target`` probe lists): the paraphrase file's entries are injected
    every round, the original text then its paraphrases in turn; the once file's entries once, in
    their original text, less its last ``unseen`` entries, which are never injected (the control).
    ``probe_kind`` picks the probes (memorization, semantic or composition). DataError naming the
    file and entry."""
    if probe_kind not in OFFICIAL_PROBES:
        raise DataError(f"probe_kind must be one of {', '.join(OFFICIAL_PROBES)}, got {probe_kind!r}")
    para, once = _official_entries(paraphrase_file), _official_entries(once_file)
    if unseen >= len(once):
        raise DataError(f"{once_file}: {len(once)} entries, not enough to hold out {unseen} as unseen and inject "
                        "the rest once")
    facts = [_official_fact(paraphrase_file, i, e, "paraphrase", probe_kind) for i, e in enumerate(para)]
    n_once = len(once) - unseen
    facts += [_official_fact(once_file, i, e, "once" if i < n_once else "unseen", probe_kind)
              for i, e in enumerate(once)]
    return FactSet(facts, source=f"official ({Path(paraphrase_file).name}, {Path(once_file).name}; {probe_kind} "
                                 f"probes; the once file's last {unseen} unseen)")


def injection_texts(facts: FactSet, round_: int) -> list[str]:
    """The texts injected at round ``round_`` (0-based): every paraphrase fact in its round-th
    paraphrase (cycled), and in round 0 every once fact."""
    out = [f.train[round_ % len(f.train)] for f in facts.split("paraphrase")]
    if round_ == 0:
        out += [f.train[0] for f in facts.split("once")]
    return out


def injection_steps(rounds: int, round_steps: int) -> list[int]:
    """The last (0-based) optimiser step of each round: its facts are in it (and, when they do not
    fit one step's rows, in the steps just before it), so the evaluation after it (every
    ``round_steps`` steps) reads them right after they were seen."""
    return [r * round_steps + round_steps - 1 for r in range(rounds)]


def continual_order(n_corpus: int, fact_rows: Sequence[Sequence[int]], rows_per_step: int, steps: int,
                    round_ends: Sequence[int], round_steps: int, seed: int) -> list[int]:
    """Row indices of a continual run, ``rows_per_step`` per step for ``steps`` steps (for
    ``llm.recipe.step_rows``' ``order``). Corpus rows are indices 0..n_corpus-1, taken in a seeded
    order and cycled. Round r's fact rows (``fact_rows[r]``, indices after the corpus) go into the
    fewest steps that hold them, ending at step ``round_ends[r]``, evenly split, at the head of each
    of those batches; the rest of every batch is corpus rows."""
    import numpy as np

    if len(fact_rows) != len(round_ends):
        raise ValueError("one list of fact rows per round")
    at: dict[int, list[int]] = {}
    for rows, end in zip(fact_rows, round_ends):
        n = -(-len(rows) // rows_per_step)
        if n > round_steps:
            raise ValueError(f"a round injects {len(rows)} rows, more than its {round_steps} steps of "
                             f"{rows_per_step} rows hold")
        for k, chunk in enumerate(np.array_split(np.asarray(rows, int), n) if n else []):
            at[end - n + 1 + k] = chunk.tolist()
    corpus = np.random.default_rng([seed, 7]).permutation(n_corpus).tolist()
    order, k = [], 0
    for step in range(steps):
        injected = at.get(step, [])
        order += injected
        for _ in range(rows_per_step - len(injected)):
            order.append(corpus[k % n_corpus])
            k += 1
    return order


def encode_probes(tokenizer, facts: Sequence[Fact]):
    """Every probe of ``facts`` as ``BOS prompt target`` with labels on the target's tokens only
    (``llm.data.Encoded``): the loss of a set of them is the targets' mean negative log probability
    per token."""
    from ...llm.data import IGNORE, Encoded

    out = []
    for f in facts:
        for prompt, target in f.probes:
            bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
            head = [*bos, *tokenizer(prompt, add_special_tokens=False).input_ids]
            tail = tokenizer(target, add_special_tokens=False).input_ids
            out.append(Encoded(head + tail, [IGNORE] * len(head) + tail))
    return out
