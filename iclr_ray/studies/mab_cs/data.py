"""Bandit instances: the paper's synthetic ones, the two real-data instances its experiments used
(arm means and costs as published with the official code), and builders that turn the real data
formats into instances the way the paper did.

MovieLens (ratings.csv: userId,movieId,rating,timestamp; movies.csv: movieId,title,genres): every
rating counts once for each genre of its movie ("|"-separated), an arm is a genre, its mean the
average rating / 5. Goodreads: an arm is a genre, its mean the share of ratings above 3 (4 or 5
stars); read from a CSV with ``genre`` and ``rating`` columns, or from a folder of JSON-lines
review files, one file per genre, as the UCSD Book Graph ships them. Costs are uniform random
numbers from a seeded generator (the paper drew them with numpy's legacy generator, seed 0 for
MovieLens), rounded to 3 decimals like the published instance files, and arms are sorted by cost.
"""
from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from ...config import DataError
from .bandit import Instance

# The paper's toy family (its Fig. 3, alpha = 0.2): arm 0 is cheap with mean x; the target is arm 0
# when x >= 0.76 = 0.8 * 0.95, else arm 1 (which ties in cost with the better arm 2).
TOY_XS = tuple(round(0.60 + 0.03 * i, 2) for i in range(12))


def toy(x: float) -> Instance:
    return Instance.make(f"toy_{x:.2f}", [x, 0.81, 0.95, 0.80], [0.05, 0.90, 0.90, 1.00])


# Arm means and costs of the instances built from MovieLens 25M (20 genres) and Goodreads (8 genres)
# in the official repository (data/bandit_instances); numbers, not code.
MOVIELENS_PAPER = Instance.make(
    "movielens_paper",
    [0.696, 0.734, 0.709, 0.702, 0.687, 0.737, 0.659, 0.723, 0.665, 0.721, 0.703, 0.685, 0.693, 0.758,
     0.785, 0.705, 0.717, 0.741, 0.711, 0.735],
    [0.020, 0.071, 0.087, 0.383, 0.424, 0.438, 0.529, 0.545, 0.549, 0.568, 0.603, 0.646, 0.715, 0.778,
     0.792, 0.833, 0.870, 0.892, 0.926, 0.964])
GOODREADS_PAPER = Instance.make(
    "goodreads_paper",
    [0.684, 0.664, 0.659, 0.672, 0.636, 0.687, 0.712, 0.684],
    [0.279, 0.354, 0.394, 0.533, 0.575, 0.688, 0.775, 0.852])

# A synthetic instance of ours with ten arms whose target moves as alpha sweeps 0.05..0.45.
SYNTH10 = Instance.make("synth10", [0.45, 0.55, 0.50, 0.70, 0.60, 0.80, 0.65, 0.90, 0.75, 0.85],
                        [0.05 + 0.1 * i for i in range(10)])

BUILTIN: dict[str, Instance] = {i.name: i for i in (MOVIELENS_PAPER, GOODREADS_PAPER, SYNTH10, *map(toy, TOY_XS))}


def two_arm(gap: float, mu_ref: float = 0.7, alpha: float = 0.0) -> Instance:
    """Known reference arm 1 (mean ``mu_ref``) and a cheaper arm 0 that falls short of the
    threshold (1 - alpha) mu_ref by ``gap``: PE must rule arm 0 out, with about ln(T gap^2)/gap^2 pulls."""
    mu0 = (1 - alpha) * mu_ref - gap
    if not 0 <= mu0 <= 1:
        raise ValueError(f"gap {gap} puts the cheap arm's mean at {mu0:.3f}, outside [0, 1]")
    return Instance.make(f"gap_{gap:g}", [mu0, mu_ref], [0.1, 0.5])


def random_costs(n: int, seed: int) -> np.ndarray:
    """The paper's cost draw: numpy's legacy generator, ``seed``, ``rand(n)``, 3 decimals."""
    return np.round(np.random.RandomState(seed).rand(n), 3)


def _rows(path: Path, need: tuple[str, ...]):
    """(line number, row dict) of a CSV with a header holding ``need``; clear errors otherwise."""
    try:
        f = open(path, newline="", encoding="utf-8")
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    with f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None:
            raise DataError(f"{path}: empty file (expected a header with {', '.join(need)})")
        missing = [c for c in need if c not in reader.fieldnames]
        if missing:
            raise DataError(f"{path}: no column {', '.join(missing)} in the header ({', '.join(reader.fieldnames)})")
        for row in reader:
            yield reader.line_num, row


def _rating(path: Path, line: int, text: str | None) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise DataError(f"{path}:{line}: rating {text!r} is not a number") from None
    if not np.isfinite(value) or value < 0:
        raise DataError(f"{path}:{line}: rating {text!r} is not a non-negative number")
    return value


def movielens(ratings_csv: str | Path, movies_csv: str | Path, cost_seed: int = 0, max_rating: float = 5.0) -> Instance:
    """One arm per genre: mean rating (over every rating of every movie with that genre) / 5."""
    ratings_csv, movies_csv = Path(ratings_csv), Path(movies_csv)
    genres_of: dict[str, list[str]] = {}
    for line, row in _rows(movies_csv, ("movieId", "genres")):
        genres_of[row["movieId"]] = [g for g in (row["genres"] or "").split("|") if g]
    if not genres_of:
        raise DataError(f"{movies_csv}: no movies")
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for line, row in _rows(ratings_csv, ("movieId", "rating")):
        r = _rating(ratings_csv, line, row["rating"])
        if r > max_rating:
            raise DataError(f"{ratings_csv}:{line}: rating {r:g} is above the {max_rating:g}-star scale")
        for g in genres_of.get(row["movieId"], ()):  # ratings of unknown movies drop out (an inner join)
            total[g] += r
            count[g] += 1
    return _instance("movielens", total, count, max_rating, cost_seed, ratings_csv)


def goodreads(path: str | Path, cost_seed: int = 0) -> Instance:
    """One arm per genre: the share of its ratings above 3 stars."""
    path = Path(path)
    liked: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl"))
        if not files:
            raise DataError(f"{path}: no .json/.jsonl review files (one per genre)")
        for file in files:
            genre = file.stem
            with open(file, encoding="utf-8") as f:
                for line, text in enumerate(f, 1):
                    if not text.strip():
                        continue
                    try:
                        rec = json.loads(text)
                    except json.JSONDecodeError as exc:
                        raise DataError(f"{file}:{line}: not JSON ({exc.msg})") from None
                    if not isinstance(rec, dict) or "rating" not in rec:
                        raise DataError(f"{file}:{line}: expected an object with a \"rating\"")
                    liked[genre] += float(_rating(file, line, str(rec["rating"])) > 3)
                    count[genre] += 1
    else:
        for line, row in _rows(path, ("genre", "rating")):
            if not row["genre"]:
                raise DataError(f"{path}:{line}: empty genre")
            liked[row["genre"]] += float(_rating(path, line, row["rating"]) > 3)
            count[row["genre"]] += 1
    return _instance("goodreads", liked, count, 1.0, cost_seed, path)


def _instance(name: str, total: dict[str, float], count: dict[str, int], scale: float, cost_seed: int,
              source: Path) -> Instance:
    genres = sorted(g for g in count if count[g])
    if len(genres) < 2:
        raise DataError(f"{source}: {len(genres)} genre(s) with ratings; a bandit needs at least two arms")
    mu = np.round([total[g] / count[g] / scale for g in genres], 3)
    return Instance.make(name, mu, random_costs(len(genres), cost_seed), genres)
