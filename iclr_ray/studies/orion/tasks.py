"""ORION retrieval tasks as generators: a context C (entities with attributes), a request R (which
attribute of which entity), the prompt x = (C, R) and the target R(C), whose first token is scored.

Six domains with the paper's structure (the texts and vocabularies are this project's own):

* ``nanoqa``: a short story with a main character's name, a city and an occupation; the request
  is a question about one of the three;
* ``induction``: key-value lines (random letter keys, word values) repeated in shuffled order; the
  request is one key;
* ``typehint``: Python code defining three classes, one function per class and one instance per
  class under a random capital-letter name; the request is an unfinished call of one function,
  whose argument is the instance of that function's class;
* ``factual``: a country (the context is the model's own knowledge of it); the request is an
  attribute (capital, language, continent), asked after a one-example prefix;
* ``translation``: an English paragraph naming three people by role and surname; the request is a
  partial French translation of one sentence that stops before the person's surname;
* ``quantity``: a list of items with how many of each (the paper's quantity retrieval); the
  request asks how many of one item (the answer: a single digit).

A *pair* is (x1, x2) = ((C1, R1), (C2, R2)) with C1 != C2 and R1 != R2; request patching expects
R1(C2). :func:`pairs` keeps only pairs whose three expected answers R2(C2), R1(C2) and R1(C1) have
different first tokens, so the outcomes can be told apart. Everything here is plain Python:
no model, no tokenizer, no I/O.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Literal, get_args

TaskName = Literal["nanoqa", "induction", "typehint", "factual", "translation", "quantity"]
TASKS: tuple[str, ...] = get_args(TaskName)


@dataclass(frozen=True)
class Prompt:
    context: int
    """index of the context in the task's list"""
    request: str
    text: str
    answer: str
    """R(C): the text the model should continue with (its first token is scored)"""


@dataclass
class Task:
    name: str
    contexts: list[dict[str, str]]
    """each context's attributes (what R(C) reads)"""
    requests: list[str]
    render: Callable[[int, str], str] = field(repr=False)
    """(context index, request) -> prompt text"""
    answer: Callable[[int, str], str] = field(repr=False)
    """(context index, request) -> R(C)"""

    def prompt(self, c: int, r: str) -> Prompt:
        return Prompt(c, r, self.render(c, r), self.answer(c, r))

    def grid(self) -> list[Prompt]:
        """Every (context, request) prompt of the task, contexts outer."""
        return [self.prompt(c, r) for c in range(len(self.contexts)) for r in self.requests]


# -- nanoQA -------------------------------------------------------------------------------------

NAMES = ["Anna", "David", "Maria", "James", "Laura", "Peter", "Sarah", "Thomas"]
CITIES = ["Paris", "London", "Berlin", "Madrid", "Rome", "Tokyo", "Cairo", "Sydney"]
JOBS = ["baker", "doctor", "teacher", "farmer", "pilot", "painter", "lawyer", "nurse"]
STORIES = [
    "{name} woke up early in {city}. As a {job}, {name} had a long day ahead, and the streets of "
    "{city} were still quiet when the work began.",
    "In the old town of {city} lived a {job} called {name}. Every morning {name} walked past the "
    "market before starting work as a {job}.",
    "It was raining in {city} when {name} finished the day. Being a {job} was not easy, but {name} "
    "loved the people of {city}.",
]
QUESTIONS = {"city": "In which city does the story take place?",
             "name": "What is the name of the main character?",
             "occupation": "What is the occupation of the main character?"}
SHOT_STORY = {"name": "Olivia", "city": "Vienna", "occupation": "chef"}
"""the solved example before every story (its values are outside the pools above)"""


def nanoqa(n_contexts: int, rng: random.Random, distractor: str | None = None) -> Task:
    """Stories with a name, a city and an occupation; questions about one of them. ``distractor``:
    a sentence (with ``{other}``, a different city) placed after the story, for the oversight
    experiment."""
    contexts = []
    for _ in range(n_contexts):
        ctx = {"name": rng.choice(NAMES), "city": rng.choice(CITIES), "occupation": rng.choice(JOBS),
               "template": str(rng.randrange(len(STORIES)))}
        ctx["other"] = rng.choice([c for c in CITIES if c != ctx["city"]])
        contexts.append(ctx)

    def render(c: int, r: str) -> str:
        ctx = contexts[c]
        story = STORIES[int(ctx["template"])].format(name=ctx["name"], city=ctx["city"], job=ctx["occupation"])
        extra = " " + distractor.format(other=ctx["other"]) if distractor else ""
        shot = STORIES[0].format(name=SHOT_STORY["name"], city=SHOT_STORY["city"], job=SHOT_STORY["occupation"])
        solved = "".join(f"Question: {QUESTIONS[q]}\nAnswer: {SHOT_STORY[q]}\n" for q in QUESTIONS)
        return (f"Read each story and answer the questions with one word.\n\nStory: {shot}\n{solved}\n"
                f"Story: {story}{extra}\nQuestion: {QUESTIONS[r]}\nAnswer:")

    return Task("nanoqa", contexts, list(QUESTIONS), render, lambda c, r: " " + contexts[c][r])


# -- induction (key-value retrieval) ------------------------------------------------------------

VALUES = ["apple", "river", "stone", "cloud", "maple", "tiger", "ember", "frost", "lemon", "piano",
          "rocket", "garden", "silver", "window", "candle", "forest", "marble", "planet", "violin", "harbor"]


def induction(n_contexts: int, rng: random.Random, n_keys: int = 6, repeats: int = 2) -> Task:
    """Random four-letter keys, each given a word value, listed ``repeats`` times in shuffled order;
    the request is a key. Every context has the same keys (so R1(C2) exists) with new values."""
    letters = "bcdfghjklmnpqrstvwxz"
    keys: list[str] = []
    while len(keys) < n_keys:
        k = "".join(rng.choice(letters) for _ in range(4))
        if k not in keys:
            keys.append(k)
    contexts = []
    for _ in range(n_contexts):
        values = rng.sample(VALUES, n_keys)
        lines = [f"{k}: {v}" for k, v in zip(keys, values)]
        order = []
        for _ in range(repeats):
            rng.shuffle(lines)
            order += lines
        contexts.append({**dict(zip(keys, values)), "text": "\n".join(order)})

    def render(c: int, r: str) -> str:
        return f"{contexts[c]['text']}\n{r}:"

    return Task("induction", contexts, keys, render, lambda c, r: " " + contexts[c][r])


# -- type hints -----------------------------------------------------------------------------------

DOMAINS = [
    {"classes": ["Circle", "Square", "Triangle"], "funcs": ["circle_area", "square_area", "triangle_area"],
     "body": "return 0.0"},
    {"classes": ["Dog", "Cat", "Bird"], "funcs": ["walk_dog", "feed_cat", "free_bird"], "body": "pass"},
    {"classes": ["Account", "Loan", "Card"], "funcs": ["close_account", "repay_loan", "block_card"],
     "body": "return None"},
]


def typehint(n_contexts: int, rng: random.Random) -> Task:
    """Three classes, a typed function per class, one instance of each under a random capital
    letter; the request is a call of one function (the answer: the instance of its class)."""
    contexts = []
    for _ in range(n_contexts):
        d = rng.randrange(len(DOMAINS))
        dom = DOMAINS[d]
        names = rng.sample("ABCDEFGHJKLMNPQRSTUVWXYZ", 3)
        order = rng.sample(range(3), 3)
        code = [f"class {c}:\n    pass\n" for c in dom["classes"]]
        code += [f"def {f}(x: {c}) -> None:\n    {dom['body']}\n" for f, c in zip(dom["funcs"], dom["classes"])]
        code += [f"{names[i]} = {dom['classes'][i]}()" for i in order]
        ctx = {"domain": str(d), "code": "\n".join(code)}
        ctx.update({f"f{i}": names[i] for i in range(3)})
        contexts.append(ctx)

    # requests are function slots (0, 1, 2): the same request asks for a different function per
    # domain, so pairs are drawn within a domain (pairs() checks the contexts' domain)
    def render(c: int, r: str) -> str:
        ctx = contexts[c]
        funcs = DOMAINS[int(ctx["domain"])]["funcs"]
        other = (int(r[1]) + 1) % 3  # one solved call of another function shows the pattern
        return (f"{ctx['code']}\n\n# call each function on the object of its type\n"
                f"{funcs[other]}({ctx[f'f{other}']})\n{funcs[int(r[1])]}(")

    return Task("typehint", contexts, ["f0", "f1", "f2"], render, lambda c, r: contexts[c][r])


# -- factual recall -------------------------------------------------------------------------------

COUNTRIES = [
    # country, capital, language, continent
    ("France", "Paris", "French", "Europe"), ("Germany", "Berlin", "German", "Europe"),
    ("Italy", "Rome", "Italian", "Europe"), ("Spain", "Madrid", "Spanish", "Europe"),
    ("Japan", "Tokyo", "Japanese", "Asia"), ("China", "Beijing", "Chinese", "Asia"),
    ("Russia", "Moscow", "Russian", "Europe"), ("Egypt", "Cairo", "Arabic", "Africa"),
    ("Greece", "Athens", "Greek", "Europe"), ("Portugal", "Lisbon", "Portuguese", "Europe"),
    ("Turkey", "Ankara", "Turkish", "Asia"), ("Kenya", "Nairobi", "Swahili", "Africa"),
    ("Poland", "Warsaw", "Polish", "Europe"), ("Sweden", "Stockholm", "Swedish", "Europe"),
    ("Norway", "Oslo", "Norwegian", "Europe"), ("Netherlands", "Amsterdam", "Dutch", "Europe"),
    ("Thailand", "Bangkok", "Thai", "Asia"), ("Vietnam", "Hanoi", "Vietnamese", "Asia"),
    ("South Korea", "Seoul", "Korean", "Asia"), ("Iran", "Tehran", "Persian", "Asia"),
    ("Argentina", "Buenos Aires", "Spanish", "South America"), ("Peru", "Lima", "Spanish", "South America"),
    ("Brazil", "Brasilia", "Portuguese", "South America"), ("Mexico", "Mexico City", "Spanish", "North America"),
    ("Canada", "Ottawa", "English", "North America"), ("Australia", "Canberra", "English", "Oceania"),
    ("Finland", "Helsinki", "Finnish", "Europe"), ("Hungary", "Budapest", "Hungarian", "Europe"),
    ("Ireland", "Dublin", "English", "Europe"), ("Austria", "Vienna", "German", "Europe"),
    ("Denmark", "Copenhagen", "Danish", "Europe"), ("Indonesia", "Jakarta", "Indonesian", "Asia"),
]
FACT_QUESTIONS = {"capital": "What is the capital of {country}?",
                  "language": "What language is spoken in {country}?",
                  "continent": "On which continent is {country}?"}
FACT_SHOT = "Question: What is the capital of Chile?\nAnswer: Santiago\n\n"


def factual(n_contexts: int, rng: random.Random) -> Task:
    """Countries (the context is what the model knows of them) and three attribute requests."""
    rows = rng.sample(COUNTRIES, min(n_contexts, len(COUNTRIES)))
    contexts = [dict(zip(("country", "capital", "language", "continent"), row)) for row in rows]

    def render(c: int, r: str) -> str:
        return FACT_SHOT + f"Question: {FACT_QUESTIONS[r].format(country=contexts[c]['country'])}\nAnswer:"

    return Task("factual", contexts, list(FACT_QUESTIONS), render, lambda c, r: " " + contexts[c][r])


# -- translation ----------------------------------------------------------------------------------

SURNAMES = {"mayor": ["Walker", "Fisher", "Hughes", "Turner", "Cooper", "Bennett"],
            "engineer": ["Brooks", "Morgan", "Parker", "Reed", "Hayes", "Wright"],
            "teacher": ["Carter", "Ward", "Price", "Bell", "Murphy", "Foster"]}
ENGLISH = ("Yesterday the new bridge opened. The mayor, Mr. {mayor}, cut the ribbon. The engineer, "
           "Mr. {engineer}, explained how it was built. The teacher, Mr. {teacher}, brought a class of "
           "children to watch.")
TRANSLATION_SHOT = ("English: The doctor, Mr. Stone, arrived late.\n"
                    "French: Le médecin, M. Stone, est arrivé en retard.")
FRENCH_START = {"mayor": "Hier, le nouveau pont a ouvert. Le maire, M.",
                "engineer": "L'ingénieur, M.",
                "teacher": "Le professeur, M."}


def translation(n_contexts: int, rng: random.Random) -> Task:
    """An English paragraph naming a mayor, an engineer and a teacher; the request is the start of
    the French translation of one sentence, stopping before that person's surname."""
    contexts = [{role: rng.choice(names) for role, names in SURNAMES.items()} for _ in range(n_contexts)]

    def render(c: int, r: str) -> str:
        return (f"Translate the text into French.\n\n{TRANSLATION_SHOT}\n\n"
                f"English: {ENGLISH.format(**contexts[c])}\nFrench: {FRENCH_START[r]}")

    return Task("translation", contexts, list(SURNAMES), render, lambda c, r: " " + contexts[c][r])


# -- quantity retrieval ---------------------------------------------------------------------------

ITEMS = ["apples", "eggs", "onions", "lemons", "carrots"]
LISTS = ["For the picnic we packed {items}.", "The market stall sold {items} this morning.",
         "On the kitchen table there were {items}."]
QUANTITY_SHOT = "On the shelf there were 4 cups, 8 plates and 6 bowls.\nQuestion: How many plates?\nAnswer: 8\n\n"


def quantity(n_contexts: int, rng: random.Random, n_items: int = 3) -> Task:
    """A sentence listing how many of each item (single digits, distinct within the list, so the
    answer's first token is its digit); the request is an item. Every context lists the same items
    (so R1(C2) exists) with new counts, in a shuffled order. The prompt ends with "Answer: " and the
    answer is the bare digit: the tokenizers of the packaged models split " 7" into a space and "7"."""
    items = rng.sample(ITEMS, n_items)
    contexts = []
    for _ in range(n_contexts):
        counts = rng.sample(range(2, 10), n_items)
        order = rng.sample(range(n_items), n_items)
        last = order[-1]
        listed = ", ".join(f"{counts[i]} {items[i]}" for i in order[:-1]) + f" and {counts[last]} {items[last]}"
        contexts.append({**{it: str(n) for it, n in zip(items, counts)},
                         "text": LISTS[rng.randrange(len(LISTS))].format(items=listed)})

    def render(c: int, r: str) -> str:
        return f"{QUANTITY_SHOT}{contexts[c]['text']}\nQuestion: How many {r}?\nAnswer: "

    return Task("quantity", contexts, items, render, lambda c, r: contexts[c][r])


BUILDERS: dict[str, Callable[[int, random.Random], Task]] = {
    "nanoqa": nanoqa, "induction": induction, "typehint": typehint, "factual": factual, "translation": translation,
    "quantity": quantity}


def build(name: str, n_contexts: int, seed: int) -> Task:
    """Task ``name`` with ``n_contexts`` contexts drawn with ``seed``."""
    return BUILDERS[name](n_contexts, random.Random(f"{name}:{seed}"))


def compatible(task: Task, c1: int, c2: int) -> bool:
    """Whether a request of context c1 is meaningful on context c2 (typehint: the same domain)."""
    if task.name == "typehint":
        return task.contexts[c1]["domain"] == task.contexts[c2]["domain"]
    return True


@dataclass(frozen=True)
class Pair:
    c1: int
    r1: str
    c2: int
    r2: str


def pairs(task: Task, usable: Callable[[int, str], bool], first: Callable[[str], object], n: int,
          seed: int) -> list[Pair]:
    """Up to ``n`` distinct pairs whose three prompts (C1,R1), (C2,R2), (C2,R1) are ``usable`` (the
    model answers them: the paper filters to those) and whose expected outcomes R2(C2), R1(C2),
    R1(C1) have pairwise different first tokens (``first``: text -> first token)."""
    rng = random.Random(f"pairs:{task.name}:{seed}")
    cands = [Pair(c1, r1, c2, r2) for c1 in range(len(task.contexts)) for c2 in range(len(task.contexts))
             for r1 in task.requests for r2 in task.requests
             if c1 != c2 and r1 != r2 and compatible(task, c1, c2)]
    rng.shuffle(cands)
    out = []
    for p in cands:
        if not (usable(p.c1, p.r1) and usable(p.c2, p.r2) and usable(p.c2, p.r1)):
            continue
        firsts = {first(task.answer(p.c2, p.r2)), first(task.answer(p.c2, p.r1)), first(task.answer(p.c1, p.r1))}
        if len(firsts) == 3:
            out.append(p)
            if len(out) == n:
                break
    return out


def same_request_contexts(task: Task, chosen: list[Pair], usable: Callable[[int, str], bool],
                          first: Callable[[str], object], seed: int) -> list[int | None]:
    """For each pair, a third context C3 for the same-request control: x4 = (C3, R2) carries x2's
    own request on another context, so request patching predicts x2's answer R2(C2) unchanged,
    where a patch that moved the answer would give R2(C3). C3 differs from C1 and C2, fits C2's
    requests (:func:`compatible`), is answered by the model, and R2(C3) has another first token
    than R2(C2) (the outcomes can be told apart); None where no context qualifies. Drawn after
    the pairs, so the pairs are the same with or without this control."""
    rng = random.Random(f"same-request:{task.name}:{seed}")
    out: list[int | None] = []
    for p in chosen:
        cands = [c for c in range(len(task.contexts)) if c not in (p.c1, p.c2) and compatible(task, c, p.c2)
                 and usable(c, p.r2) and first(task.answer(c, p.r2)) != first(task.answer(p.c2, p.r2))]
        out.append(rng.choice(cands) if cands else None)
    return out


def chance_rate(task: Task, request: str, first: Callable[[str], object]) -> float:
    """The rate of a guess drawn uniformly from the first tokens of the request's answers over
    the task's contexts (the random-guess baseline of R(C) for that request)."""
    return 1.0 / len({first(task.answer(c, request)) for c in range(len(task.contexts))})
