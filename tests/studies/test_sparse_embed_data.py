"""sparse_embed inputs: the generators, and the docword / npz loaders on files the tests write."""
import numpy as np
import pytest
import scipy.sparse as sp

from iclr_ray.config import DataError
from iclr_ray.studies.sparse_embed import data


@pytest.mark.parametrize("clusters", [0, 5])
def test_generated_vectors_are_non_negative_and_exactly_s_sparse(clusters):
    X = data.random_sparse(200, 3_000_000, 12, seed=0, clusters=clusters)
    assert X.shape == (200, 3_000_000) and (np.diff(X.indptr) == 12).all() and (X.data > 0).all()
    assert data.sparsity(X) == 12
    assert X.data.nbytes + X.indices.nbytes < 200 * 12 * 16  # stored sparse, d never materialised
    if clusters:
        shared = len(np.intersect1d(X[0].indices, X[5].indices))  # same cluster
        other = len(np.intersect1d(X[0].indices, X[1].indices))
        assert shared >= 6 and other == 0


def test_signed_keeps_supports_and_magnitudes():
    X = data.random_sparse(50, 1000, 5, seed=1)
    S = data.signed(X, seed=2)
    assert np.array_equal(abs(S).toarray(), X.toarray()) and (S.data < 0).any() and (S.data > 0).any()


def test_docword_loader(tmp_path):
    f = tmp_path / "docword.tiny.txt"
    f.write_text("4\n6\n6\n1 1 2\n1 3 1\n2 6 4\n4 2 1\n4 2 1\n4 5 3\n")
    X = data.load_docword(f)
    assert X.shape == (3, 6)  # document 3 has no words and is dropped
    assert X.toarray().tolist() == [[2, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 4], [0, 2, 0, 0, 3, 0]]  # repeats summed
    assert data.load_docword(f, max_docs=2).shape == (2, 6)


@pytest.mark.parametrize("text, message", [
    ("x\n6\n6\n", "docword.bad.txt:1: expected the header count"),
    ("4\n6\n6\n1 1 2\n1 nine 1\n", "docword.bad.txt:5: expected 'docID wordID count'"),
    ("4\n6\n6\n1 7 2\n", "docword.bad.txt:4: ids must lie in 1..4 and 1..6"),
    ("4\n6\n6\n1 1 1\n", "need at least 2 non-zero vectors"),
])
def test_docword_errors_name_the_line(tmp_path, text, message):
    f = tmp_path / "docword.bad.txt"
    f.write_text(text)
    with pytest.raises(DataError, match=message.replace(".", r"\.")):
        data.load_docword(f)


def test_npz_loader(tmp_path):
    X = data.random_sparse(30, 5000, 4, seed=3)
    sp.save_npz(tmp_path / "x.npz", X)
    Y = data.load_npz(tmp_path / "x.npz", max_rows=10)
    assert Y.shape == (10, 5000) and np.array_equal(Y.toarray(), X[:10].toarray())
    sp.save_npz(tmp_path / "s.npz", data.signed(X, seed=1))
    with pytest.raises(DataError, match="need non-negative vectors"):
        data.load_npz(tmp_path / "s.npz")
    (tmp_path / "junk.npz").write_text("not a matrix")
    with pytest.raises(DataError, match="cannot read .*junk.npz"):
        data.load_npz(tmp_path / "junk.npz")


def test_reviews_bag_of_words_is_real_sparse_counts():
    X = data.reviews_bag_of_words(200)
    assert X.shape[0] == 200 and X.shape[1] > 10_000  # the whole corpus's vocabulary
    assert X.dtype == np.float64 and (X.data >= 1).all() and np.array_equal(X.data, np.round(X.data))
    nnz = np.diff(X.indptr)
    assert nnz.min() >= 1 and 20 < nnz.mean() < 80 and X.nnz / (X.shape[0] * X.shape[1]) < 0.01
    assert (X.data == 1).mean() > 0.7  # most words appear once in a review: many equal values
    assert data.reviews_bag_of_words(50).toarray().tolist() == X[:50].toarray().tolist()  # the first n reviews
