"""The generated instruction set of the sft_recipe study: a small synthetic world, a plain-text
pre-training corpus about it, SFT conversations in several knowledge domains and skills, and
held-out evaluation sets (multiple choice and exact-match prompts).

In the spirit of the LAB/InstructLab data the paper fine-tunes on, "knowledge" samples answer a
question grounded in a short document given in the prompt (three domains: people, places,
animals), and "skills" samples apply a templated transformation to a fresh input (repeat,
last word, swap, reverse order, count, add). Everything is drawn from one seeded generator, so a seed
gives the same data on every machine; held-out items use inputs drawn separately from training.

Pure Python: no Ray, no I/O.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

KNOWLEDGE_DOMAINS = ("people", "places", "animals")
SKILLS = ("repeat", "last_word", "swap", "reverse_order", "count", "add")

_ONSETS = "b d f g k l m n p r s t v z".split()
_VOWELS = "a e i o u".split()
CITIES = "Verun Kalmor Tessa Ondrel Brisk Halvar Mirth Sorren Quill Dunmar Pell Iskar".split()
JOBS = "potter baker weaver miner sailor farmer scribe tailor smith hunter".split()
RIVERS = "Amber Slate Willow Copper Hollow Silver Thorn Ash Reed Frost".split()
GOODS = "salt wool glass honey tea rope ink cheese iron paper".split()
ANIMALS = "fox otter heron lynx badger crane marten vole ibex wren".split()
FOODS = "berries fish seeds roots insects grass nuts worms moss eggs".split()
COLOURS = "red grey brown black white golden silver green blue tan".split()


def _word(rng: random.Random, syllables: tuple[int, int] = (2, 3)) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(rng.randint(*syllables)))


def _name(rng: random.Random) -> str:
    return f"{_word(rng).capitalize()} {_word(rng).capitalize()}"


@dataclass
class Fact:
    """A document sentence and the questions it answers: (question, answer, attribute values
    of the same kind, for multiple-choice distractors)."""
    sentence: str
    qa: list[tuple[str, str, tuple[str, ...]]]


def _fact(domain: str, rng: random.Random) -> tuple[str, Fact]:
    if domain == "people":
        who, city, job = _name(rng), rng.choice(CITIES), rng.choice(JOBS)
        return who, Fact(f"{who} lives in {city} and works as a {job}.",
                         [(f"Where does {who} live?", city, tuple(CITIES)),
                          (f"What does {who} work as?", job, tuple(JOBS))])
    if domain == "places":
        town, river, good = _word(rng).capitalize() + "ton", rng.choice(RIVERS), rng.choice(GOODS)
        return town, Fact(f"{town} lies on the {river} river and is known for its {good}.",
                          [(f"Which river does {town} lie on?", river, tuple(RIVERS)),
                           (f"What is {town} known for?", good, tuple(GOODS))])
    if domain == "animals":
        kind = f"{_word(rng, (2, 2))} {rng.choice(ANIMALS)}"
        food, colour = rng.choice(FOODS), rng.choice(COLOURS)
        return kind, Fact(f"The {kind} eats {food} and has {colour} fur.",
                          [(f"What does the {kind} eat?", food, tuple(FOODS)),
                           (f"What colour is the fur of the {kind}?", colour, tuple(COLOURS))])
    raise ValueError(f"unknown knowledge domain {domain!r}")


@dataclass
class Item:
    """One generated example: its domain, the user prompt, the reference answer and (knowledge
    only) four answer choices with the index of the right one."""
    domain: str
    prompt: str
    answer: str
    choices: list[str] = field(default_factory=list)
    correct: int = -1

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.prompt}, {"role": "assistant", "content": self.answer}]


def knowledge_item(domain: str, rng: random.Random, facts_per_doc: int = 2) -> Item:
    """A question about one of ``facts_per_doc`` facts of a document given in the prompt.
    The choices hold the answer, the same attribute of the document's other subjects and random
    values of that attribute (so reading the document, not guessing, gets it right)."""
    facts: list[Fact] = []
    subjects: set[str] = set()
    while len(facts) < facts_per_doc:
        subject, fact = _fact(domain, rng)
        if subject not in subjects:
            subjects.add(subject)
            facts.append(fact)
    target = rng.randrange(facts_per_doc)
    which = rng.randrange(len(facts[target].qa))
    question, answer, pool = facts[target].qa[which]
    choices = [answer]
    for f in facts:
        v = f.qa[which][1]
        if v not in choices and len(choices) < 4:
            choices.append(v)
    while len(choices) < 4:
        v = rng.choice(pool)
        if v not in choices:
            choices.append(v)
    rng.shuffle(choices)
    doc = " ".join(f.sentence for f in facts)
    return Item(domain, f"{doc}\nQuestion: {question}", answer, choices, choices.index(answer))


def skill_item(skill: str, rng: random.Random) -> Item:
    """A templated transformation of fresh random words or digits. The skills work on whole
    words (sub-word tokens), not letters: a tiny byte-BPE model cannot learn letter-level edits
    (reversing or capitalising letters) at this budget, and they are not what is being studied."""
    words = [_word(rng) for _ in range(rng.randint(2, 5))]
    if skill == "repeat":
        return Item(skill, f"Repeat exactly: {' '.join(words)}", " ".join(words))
    if skill == "last_word":
        return Item(skill, f"What is the last word of: {' '.join(words)}", words[-1])
    if skill == "swap":
        return Item(skill, f"Swap the two words: {words[0]} {words[1]}", f"{words[1]} {words[0]}")
    if skill == "reverse_order":
        return Item(skill, f"Reverse the order of: {' '.join(words[:3])}", " ".join(words[2::-1]))
    if skill == "count":
        return Item(skill, f"How many words are in: {' '.join(words)}", str(len(words)))
    if skill == "add":
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        return Item(skill, f"Add {a} and {b}.", str(a + b))
    raise ValueError(f"unknown skill {skill!r}")


def make_items(kind: str, n: int, rng: random.Random) -> list[Item]:
    """``n`` items spread evenly (round robin) over the domains of ``kind`` ("knowledge"/"skills")."""
    names = KNOWLEDGE_DOMAINS if kind == "knowledge" else SKILLS
    make = knowledge_item if kind == "knowledge" else skill_item
    return [make(names[i % len(names)], rng) for i in range(n)]


def pretraining_documents(n: int, rng: random.Random) -> list[str]:
    """Plain text about the same world, the way web text states things without an instruction
    format: documents of facts (every other one followed by a question and its answer, as FAQ
    pages do) and sentences stating what each skill computes."""
    docs = []
    for i in range(n):
        if i % 2 == 0:
            domain = KNOWLEDGE_DOMAINS[(i // 2) % len(KNOWLEDGE_DOMAINS)]
            if i % 4 == 0:
                it = knowledge_item(domain, rng)
                docs.append(f"{it.prompt} Answer: {it.answer}.")
            else:
                docs.append(" ".join(_fact(domain, rng)[1].sentence for _ in range(rng.randint(2, 5))))
        else:
            parts = []
            for _ in range(rng.randint(2, 4)):
                it = skill_item(rng.choice(SKILLS), rng)
                parts.append(f"{it.prompt} {it.answer}.")
            docs.append(" ".join(parts))
    return docs


@dataclass
class Dataset:
    pretrain: list[str]
    train_knowledge: list[Item]
    train_skills: list[Item]
    eval_knowledge: list[Item]
    eval_skills: list[Item]

    @property
    def train(self) -> list[Item]:
        return self.train_knowledge + self.train_skills


def generate(seed: int, n_pretrain: int, n_train: int, n_eval: int) -> Dataset:
    """The whole data set of one seed: ``n_train`` SFT items (half knowledge, half skills) and
    ``n_eval`` held-out items per half, from separate random streams."""
    streams = [random.Random(f"{seed}:{part}") for part in ("pre", "trk", "trs", "evk", "evs")]
    half = n_train // 2
    return Dataset(
        pretrain=pretraining_documents(n_pretrain, streams[0]),
        train_knowledge=make_items("knowledge", half, streams[1]),
        train_skills=make_items("skills", n_train - half, streams[2]),
        eval_knowledge=make_items("knowledge", n_eval, streams[3]),
        eval_skills=make_items("skills", n_eval, streams[4]),
    )
