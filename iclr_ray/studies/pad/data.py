"""pad data: user queries, the preferences a user can state, the rules that score a response
against each, preference pairs built from the base model's own samples, and the JSONL readers for
real prompt and pair files. No Ray.

Preferences are stated as text (the PRM reads them in its prompt) and scored by rules the
evaluation applies to every method alike, each in [0, 1]:

- ``simple``: the share of words of at most six letters (everyday vocabulary);
- ``excited``: the share of sentences that end with "!" (an enthusiastic tone);
- ``personal``: the share of words that address the reader (you, your, ...).

Each is a property of any prefix of a reply, so replies cut at ``max_tokens`` are scored fairly.
A combination ("excited+personal") states both texts and is scored by the mean of its rules;
the PRM is trained on the single preferences only, so a combination tests generalisation to an
unseen preference. Pairs come from the base model's samples of a query (no preference in its
prompt): for each preference, the sample its rule scores highest is chosen and the lowest
rejected, when they differ by at least a margin.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ...config import DataError

WORD = re.compile(r"[A-Za-z']+")
SENTENCE_END = re.compile(r"[.!?]+")


def words(text: str) -> list[str]:
    return WORD.findall(text)


SECOND_PERSON = {"you", "your", "yours", "yourself", "yourselves", "you're", "you've", "you'll", "you'd"}


def personal(text: str) -> float:
    w = [x.lower() for x in words(text)]
    return sum(x in SECOND_PERSON for x in w) / len(w) if w else 0.0


def simple(text: str) -> float:
    w = [x.strip("'") for x in words(text)]
    w = [x for x in w if x]
    return sum(len(x) <= 6 for x in w) / len(w) if w else 0.0


def excited(text: str) -> float:
    ends = SENTENCE_END.findall(text)
    tail = text.strip()
    if tail and tail[-1] not in ".!?" and words(tail.split(".")[-1]):
        ends.append("")  # an unfinished last sentence counts, without a "!"
    return sum("!" in e for e in ends) / len(ends) if ends else 0.0


@dataclass(frozen=True)
class Preference:
    name: str
    text: str
    """how the user states it (the PRM's prompt, and the preference-prompting baseline's)"""
    rules: tuple[str, ...]
    """the rule(s) that score it; a combination is scored by their mean"""


RULES: dict[str, Callable[[str], float]] = {"simple": simple, "excited": excited, "personal": personal}

SINGLES: dict[str, Preference] = {
    "simple": Preference("simple", "Use simple, short, everyday words.", ("simple",)),
    "excited": Preference("excited", "Sound excited and enthusiastic, with exclamation marks!", ("excited",)),
    "personal": Preference("personal", "Talk to me directly, addressing me as you.", ("personal",)),
}


def preference(name: str) -> Preference:
    """A single preference by name, or a combination ``a+b`` (both texts, both rules)."""
    parts = name.split("+")
    unknown = [p for p in parts if p not in SINGLES]
    if unknown or len(set(parts)) != len(parts):
        raise ValueError(f"unknown preference {name!r}; known: {', '.join(SINGLES)} and combinations a+b")
    if len(parts) == 1:
        return SINGLES[name]
    return Preference(name, " ".join(SINGLES[p].text for p in parts), tuple(p for p in parts))


def preference_text(name: str) -> str:
    """How a preference is stated to the PRM: a known name's (or combination's) text; anything else
    is taken as the user's own words (a real data set's principle, a Serve request's free text)."""
    try:
        return preference(name).text
    except ValueError:
        return name


def score(text: str, pref: Preference) -> float:
    return float(np.mean([RULES[r](text) for r in pref.rules]))


def rule_scores(text: str) -> dict[str, float]:
    return {name: rule(text) for name, rule in RULES.items()}


# -- queries -----------------------------------------------------------------------------------------

TEMPLATES = ("How can I get better at {t}?", "What should a beginner know about {t}?",
             "Give me some advice on {t}.", "Tell me about {t}.", "Why do people enjoy {t}?",
             "What are common mistakes with {t}?")
TOPICS = (
    "cooking pasta", "saving money", "learning a new language", "running a marathon", "caring for a cat",
    "growing tomatoes", "writing a cover letter", "playing chess", "taking photos at night", "baking bread",
    "keeping a journal", "planning a road trip", "learning to swim", "public speaking", "painting with watercolours",
    "fixing a flat bike tyre", "studying for exams", "making new friends", "training a puppy", "brewing coffee",
    "hiking in the mountains", "reading more books", "decorating a small flat", "playing the guitar",
    "staying focused at work", "camping with children", "knitting a scarf", "cleaning the kitchen",
    "choosing a laptop", "learning to code", "meditation", "birdwatching", "making soup", "riding a horse",
    "sleeping better", "packing for a flight", "starting a podcast", "buying a used car", "drawing portraits",
    "managing stress", "hosting a dinner party", "learning to dance", "building a bookshelf", "fishing in a lake",
    "keeping houseplants alive", "writing a short story", "skiing", "doing yoga", "recycling at home",
    "teaching a child to read", "making pizza", "planting a tree", "playing tennis", "visiting a museum",
    "organising a closet", "learning history", "composting", "watching the stars", "sewing a button",
    "making a budget", "doing push-ups", "cycling to work", "baking cookies", "learning magic tricks",
)


def queries(n: int, held_out: bool, seed: int = 0) -> list[str]:
    """``n`` queries: templates over the first two thirds of the topics (training) or the last
    third (held out, so held-out prompts are about topics the PRM never saw)."""
    cut = 2 * len(TOPICS) // 3
    topics = TOPICS[cut:] if held_out else TOPICS[:cut]
    all_q = [t.format(t=topic) for topic in topics for t in TEMPLATES]
    if n > len(all_q):
        raise DataError(f"{n} {'held-out' if held_out else 'training'} queries asked for; the generator has "
                        f"{len(all_q)} (give prompts_jsonl for more)")
    rng = np.random.default_rng(seed + (1 if held_out else 0))
    return [all_q[i] for i in sorted(rng.choice(len(all_q), size=n, replace=False))]


# -- pairs -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TextPair:
    query: str
    preference: str
    chosen: str
    rejected: str
    gap: float
    """score(chosen) - score(rejected) under the preference's rule"""


def build_pairs(query_samples: Sequence[tuple[str, Sequence[str]]], prefs: Sequence[str],
                min_gap: float) -> list[TextPair]:
    """For each query and preference: its best-scored sample chosen, its worst rejected, when the
    rule tells them apart by at least ``min_gap`` (ties teach nothing)."""
    out = []
    for query, samples in query_samples:
        for name in prefs:
            pref = preference(name)
            scores = [score(s, pref) for s in samples]
            hi, lo = int(np.argmax(scores)), int(np.argmin(scores))
            if scores[hi] - scores[lo] >= min_gap and samples[hi] != samples[lo]:
                out.append(TextPair(query, name, samples[hi], samples[lo], scores[hi] - scores[lo]))
    return out


def label_swaps(n: int, seed: int) -> np.ndarray:
    """The negative control's mask over n pairs: True where chosen and rejected are swapped, a
    seeded random half (so the pairs carry no preference at all: same texts, same prompts)."""
    return np.random.default_rng(seed).permutation(n) < n // 2


# -- real files --------------------------------------------------------------------------------------

def _objects(path: str | Path):
    from ...llm.data import iter_jsonl

    for where, row in iter_jsonl(path):
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object")
        yield where, row


def read_prompts(path: str | Path) -> list[str]:
    """Queries from a JSONL of {"prompt": ...} (P-Soups' Koala prompts, HelpSteer2's)."""
    out = []
    for where, row in _objects(path):
        q = row.get("prompt", row.get("instruction"))
        if not isinstance(q, str) or not q.strip():
            raise DataError(f"{where}: needs a non-empty string \"prompt\"")
        out.append(q.strip())
    if not out:
        raise DataError(f"{path}: no prompts")
    return out


def read_pairs(path: str | Path) -> list[TextPair]:
    """Preference pairs from a JSONL of {"prompt", "preference", "chosen", "rejected"}; the
    preference is a known name or free text (a real data set's own principle)."""
    out = []
    for where, row in _objects(path):
        missing = [k for k in ("prompt", "preference", "chosen", "rejected") if not isinstance(row.get(k), str)
                   or not row[k].strip()]
        if missing:
            raise DataError(f"{where}: needs non-empty strings {', '.join(missing)}")
        out.append(TextPair(row["prompt"], row["preference"], row["chosen"], row["rejected"], float("nan")))
    if not out:
        raise DataError(f"{path}: no pairs")
    return out
