"""coord_sketch inputs: generators, the join-regression construction, and the CSV table loader."""
import numpy as np
import pytest
import scipy.sparse as sp

from iclr_ray.config import DataError
from iclr_ray.studies.coord_sketch import data


def test_sparse_pair_structure():
    p = data.sparse_pair(n=1000, d=50, m=40, nnz=6, overlap=0.3, tail=1.5, seed=0)
    assert p.A.shape == (650, 50) and p.B.shape == (650, 40)
    assert np.intersect1d(p.keys_a, p.keys_b).size == 300
    assert np.all(np.diff(p.A.indptr) == 6) and np.all(np.diff(p.keys_a) > 0)
    dense = data.sparse_pair(n=200, d=30, m=30, nnz=30, overlap=1.0, tail=None, seed=0)
    assert dense.A.nnz == 200 * 30  # every column, each once


def test_exact_product_is_over_the_key_join():
    keys_a, keys_b = np.array([1, 2, 5]), np.array([2, 5, 9])
    A, B = np.arange(6.0).reshape(3, 2), np.arange(6.0).reshape(3, 2) + 1
    p = data.Pair(keys_a, sp.csr_matrix(A), keys_b, sp.csr_matrix(B))
    assert np.allclose(p.exact(), A[1:].T @ B[:2])


def test_attention_pv_product_is_the_attention_output():
    p = data.attention_pair(seq_len=64, d_head=8, tail=3.0, product="pv", seed=1)
    P = p.A.toarray().T
    assert np.allclose(P.sum(axis=1), 1.0) and (P > 0).all()
    assert np.allclose(p.exact(), P @ p.B.toarray())
    with pytest.raises(ValueError):
        data.attention_pair(8, 2, 3.0, "kv", 0)


def test_regression_pair_holds_the_normal_equations_of_the_join():
    t = data.synthetic_tables(n_keys=2000, n_features=3, coverage_x=0.6, coverage_y=0.5, noise=0.1, seed=0)
    Xj, yj = data.join(t)
    XtX, Xty = data.normal_equations(data.regression_pair(t).exact(), 4)
    assert np.allclose(XtX, Xj.T @ Xj) and np.allclose(Xty, Xj.T @ yj)
    theta = data.solve(XtX, Xty, 0.0)
    assert np.allclose(theta, np.linalg.lstsq(Xj, yj, rcond=None)[0])


def write(path, text):
    path.write_text(text)
    return path


def test_load_tables_joins_on_string_keys(tmp_path):
    x = write(tmp_path / "x.csv", "id,a,b,skip\nu1,1,2,9\nu2,3,4,9\nu3,5,6,9\n")
    y = write(tmp_path / "y.csv", "id,y\nu3,30\nu1,10\nu7,70\n")
    t = data.load_tables(x, y, key="id", target="y", features=["a", "b"])
    Xj, yj = data.join(t)
    order = np.argsort(yj)
    assert np.allclose(Xj[order], [[1, 1, 2], [1, 5, 6]]) and np.allclose(yj[order], [10, 30])
    assert t.feature_names == ["a", "b"]
    assert data.load_tables(x, y, key="id", target="y").feature_names == ["a", "b", "skip"]


@pytest.mark.parametrize("x_text, message", [
    ("", "is empty"),
    ("id,a\n", "header but no data rows"),
    ("key,a\nu1,1\n", "no key column 'id'"),
    ("id,a\nu1,1,3\n", "x.csv:2: 3 fields, header has 2"),
    ("id,a\nu1,1\nu1,2\n", "x.csv:3: key 'u1' repeats line 2"),
    ("id,a\nu1,1\n\nu2,nan?\n", "x.csv:4: column 'a' is not a finite number: 'nan?'"),
    ("id,a\nu1,inf\n", "x.csv:2: column 'a' is not a finite number: 'inf'"),
])
def test_load_tables_errors_name_the_place(tmp_path, x_text, message):
    x = write(tmp_path / "x.csv", x_text)
    y = write(tmp_path / "y.csv", "id,y\nu1,1\n")
    with pytest.raises(DataError) as err:
        data.load_tables(x, y, key="id", target="y")
    assert message in str(err.value)


def test_load_tables_missing_file_target_and_empty_join(tmp_path):
    x = write(tmp_path / "x.csv", "id,a\nu1,1\n")
    with pytest.raises(DataError, match="cannot read"):
        data.load_tables(x, tmp_path / "none.csv", key="id", target="y")
    with pytest.raises(DataError, match="no column 'y'"):
        data.load_tables(x, write(tmp_path / "y.csv", "id,z\nu1,1\n"), key="id", target="y")
    with pytest.raises(DataError, match="share no 'id' values"):
        data.load_tables(x, write(tmp_path / "y2.csv", "id,y\nu9,1\n"), key="id", target="y")


def test_a_join_too_small_to_fit_is_refused(tmp_path):
    x = write(tmp_path / "x.csv", "id,a,b\nu1,1,2\nu2,3,4\n")
    y = write(tmp_path / "y.csv", "id,y\nu1,1\nu2,2\n")
    with pytest.raises(DataError, match="join on 2 keys, fewer than the 3 coefficients"):
        data.load_tables(x, y, key="id", target="y").check_join()
    data.load_tables(x, y, key="id", target="y", features=["a"]).check_join()


def test_causal_softmax_and_the_head_products():
    rng = np.random.default_rng(0)
    n, d = 40, 8
    Q, K, V = rng.standard_normal((3, n, d))
    P = data.causal_softmax(Q, K)
    assert np.allclose(P.sum(axis=1), 1.0) and np.all(P[np.triu_indices(n, 1)] == 0) and np.all(P[np.tril_indices(n)] > 0)
    # row i: softmax over keys j <= i only, scaled by 1/sqrt(d)
    i = 17
    logits = Q[i] @ K[: i + 1].T / np.sqrt(d)
    assert np.allclose(P[i, : i + 1], np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum())
    h = data.HeadQKV(layer=0, head=0, kv_head=0, Q=Q, K=K, V=V, out=P @ V)
    pairs = data.head_pairs(h)
    assert np.allclose(pairs["qk"].exact(), Q.T @ K) and np.allclose(pairs["pv"].exact(), h.out)
    # the keys are token positions: row j of A for the PV product is the attention key j receives
    assert np.allclose(pairs["pv"].A.toarray()[3], P[:, 3]) and pairs["pv"].A.nnz == n * (n + 1) // 2


def test_review_tokens_take_the_first_tokens_and_refuse_short_text():
    pytest.importorskip("transformers")
    from iclr_ray.llm.model import build_tokenizer

    tok = build_tokenizer()  # a real byte-level tokenizer: one token per byte of these texts
    texts = ["Lovely dress", "Too small"]
    ids = data.review_tokens(tok, texts, 17)
    assert tok.decode(ids.tolist()) == "Lovely dress\n\nToo" and ids.dtype == np.int64
    with pytest.raises(DataError, match="2 review texts give 23 tokens, fewer than attention.seq_len = 30"):
        data.review_tokens(tok, texts, 30)


def test_top_k_rows_keep_each_querys_largest_weights():
    rng = np.random.default_rng(1)
    P = data.causal_softmax(*rng.standard_normal((2, 30, 4)))
    T = data.top_k_rows(P, 5)
    assert np.allclose(T.sum(axis=1), 1.0) and np.all((T > 0).sum(axis=1) == np.minimum(np.arange(1, 31), 5))
    i = 20
    kept = np.flatnonzero(T[i])
    assert set(kept) == set(np.argsort(P[i])[-5:]) and np.allclose(T[i, kept], P[i, kept] / P[i, kept].sum())
    assert data.top_k_rows(P, 30) is P
