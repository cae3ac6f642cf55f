"""sparse_embed's maps and distances against brute force on small d, and the paper's bounds on
random sets: one-sidedness, isolation gives exactness, the guaranteed dimensions, exact l_inf,
the birthday formula, compressed-sensing recovery, and the signed counterexample."""
import math

import numpy as np
import pytest
import scipy.sparse as sp

from iclr_ray.studies.sparse_embed import data, embeddings, geometry, measure

PS = (1.0, 2.0, 3.0, math.inf)


def brute_maxpool(X: np.ndarray, mp: embeddings.MaxPool) -> np.ndarray:
    """Bucket maxima over all d coordinates (zeros included), straight from the definition."""
    out = np.zeros((X.shape[0], mp.dims))
    for j in range(mp.t):
        h = mp.buckets(np.arange(mp.d), j)
        for b in range(mp.m):
            members = np.flatnonzero(h == b)
            out[:, j * mp.m + b] = X[:, members].max(axis=1) if members.size else 0.0
    return out


def brute_distances(A: np.ndarray, ia, ib, p: float, group: int | None = None) -> np.ndarray:
    diff = np.abs(A[ia] - A[ib])
    g = diff.reshape(len(ia), -1, group) if group else diff[:, None, :]
    return g.max(axis=2) if math.isinf(p) else (g**p).sum(axis=2)


@pytest.mark.parametrize("signed", [False, True])
def test_maxpool_matches_the_definition(signed):
    X = data.random_sparse(12, 60, 5, seed=1)
    if signed:
        X = data.signed(X, seed=2)
    mp = embeddings.MaxPool(60, 7, 4, seed=3)
    assert np.array_equal(mp.embed(X).toarray(), brute_maxpool(X.toarray(), mp))


def test_maps_are_per_vector_and_countsketch_is_linear():
    X = data.random_sparse(20, 10_000, 6, seed=0)
    for cls in (embeddings.MaxPool, embeddings.CountSketch):
        f = cls(10_000, 16, 3, seed=9)
        whole = f.embed(X).toarray()
        one_by_one = np.vstack([f.embed(X[i]).toarray() for i in range(X.shape[0])])
        assert np.array_equal(whole, one_by_one)  # a vector's image does not depend on the others
        assert not np.array_equal(whole, cls(10_000, 16, 3, seed=10).embed(X).toarray())
    cs = embeddings.CountSketch(10_000, 16, 3, seed=9)
    a, b = X[0], X[1]
    assert np.allclose(cs.embed(2 * a - b).toarray(), 2 * cs.embed(a).toarray() - cs.embed(b).toarray())


@pytest.mark.parametrize("cells", [1 << 22, 7])
def test_pair_distances_against_brute_force(cells):
    """Signed entries, a stored zero, groups that do not divide the width, and (cells = 7) one
    dense column per block: the same numbers as the definition, l_inf bit for bit."""
    X = data.signed(data.random_sparse(15, 40, 6, seed=4), seed=5)
    X.data[3] = 0.0  # a stored zero reads as absent
    A = X.toarray()
    ia, ib = geometry.all_pairs(15)
    got = geometry.pair_distances(X, ia, ib, PS, group_size=8, cells=cells)
    whole = geometry.pair_distances(X, ia, ib, PS, cells=cells)
    odd = geometry.pair_distances(X, ia, ib, PS, group_size=7, cells=cells)
    for p in PS:
        assert np.allclose(got[p], brute_distances(A, ia, ib, p, 8), rtol=1e-12)
        assert np.allclose(whole[p][:, 0], brute_distances(A, ia, ib, p)[:, 0], rtol=1e-12)
        padded = np.pad(A, ((0, 0), (0, 2)))  # 40 columns in groups of 7: the last group has 5
        assert np.allclose(odd[p], brute_distances(padded, ia, ib, p, 7), rtol=1e-12)
    assert np.array_equal(got[math.inf], brute_distances(A, ia, ib, math.inf, 8))  # l_inf bit for bit
    some = geometry.pair_distances(X, ia[[5, 0, 9]], ib[[5, 0, 9]], PS)  # any pairs, in any order
    assert np.array_equal(some[math.inf][:, 0], whole[math.inf][[5, 0, 9], 0])


def test_distances_on_wide_sparse_inputs_cost_nothing_in_d():
    X = data.random_sparse(30, 1 << 40, 5, seed=1)  # d = 2^40: only the used columns are visited
    ia, ib = geometry.all_pairs(30)
    got = geometry.norms(geometry.pair_distances(X, ia, ib, (1.0, math.inf)))
    for k in (0, 17, 400):
        x, y = X[ia[k]], X[ib[k]]
        assert got[1.0][k] == pytest.approx(abs(x - y).sum()) and got[math.inf][k] == abs(x - y).max()


def _ratios(X, f, group, p):
    ia, ib = geometry.all_pairs(X.shape[0])
    true = geometry.norms(geometry.pair_distances(X, ia, ib, (p,)))[p]
    est = embeddings.estimate(geometry.pair_distances(f.embed(X), ia, ib, (p,), group)[p], p)
    return est, true


@pytest.mark.parametrize("signed", [False, True])
def test_estimate_never_exceeds_the_true_distance(signed):
    X = data.random_sparse(40, 5000, 10, seed=6)
    if signed:
        X = data.signed(X, seed=7)
    for m, t in ((5, 3), (40, 10)):
        f = embeddings.MaxPool(5000, m, t, seed=8)
        for p in PS:
            est, true = _ratios(X, f, m, p)
            assert (est <= true * (1 + 1e-12)).all()


def test_isolated_supports_give_every_distance_exactly():
    X = data.random_sparse(10, 200_000, 4, seed=1)
    f = embeddings.MaxPool(200_000, 100_000, 2, seed=2)  # 40 support coordinates, 1e5 buckets: no collision
    assert embeddings.isolation_failure(4, 100_000) < 1e-4
    for p in PS:
        est, true = _ratios(X, f, 100_000, p)
        assert np.allclose(est, true, rtol=1e-12)


def test_guaranteed_dimensions_keep_every_pair_within_eps():
    n, s, eps = 20, 4, 0.3
    m, t = embeddings.lp_dims_guaranteed(s, n, eps, delta=0.1)
    X = data.random_sparse(n, 100_000, s, seed=3)
    for seed in range(3):
        f = embeddings.MaxPool(100_000, m, t, seed=seed)
        for p in PS:
            est, true = _ratios(X, f, m, p)
            r = est / true
            assert r.max() <= 1 + 1e-12 and r.min() >= 1 - eps


def test_tight_dimensions_fail_and_distortion_falls_with_m():
    """Too few buckets: distances shrink; more buckets at the same t: the worst pair improves."""
    X = data.random_sparse(30, 50_000, 12, seed=4)
    worst = []
    for m in (4, 16, 64, 256):
        est, true = _ratios(X, embeddings.MaxPool(50_000, m, 8, seed=0), m, 1.0)
        worst.append(1 - (est / true).min())
    assert worst[0] > 0.3 and all(a > b for a, b in zip(worst, worst[1:]))


def test_linf_is_exact_at_the_predicted_repetitions():
    n, s = 64, 8
    m = 4 * s
    t = embeddings.linf_reps(s, n, m, delta=0.1)
    assert t == math.ceil(math.log(n * (n - 1) / 2 / 0.1) / math.log(1 / embeddings.isolation_failure(s, m)))
    X = data.random_sparse(n, 1_000_000, s, seed=5)
    for seed in range(4):
        est, true = _ratios(X, embeddings.MaxPool(1_000_000, m, t, seed=seed), m, math.inf)
        assert np.array_equal(est, true)
    est, true = _ratios(X, embeddings.MaxPool(1_000_000, m, 1, seed=0), m, math.inf)
    assert not np.array_equal(est, true)  # one repetition is not enough


def test_signed_vectors_break_the_map():
    """x has its one non-zero negative, y = 2e_k: every bucket of x reads 0, so D(x, y) = 2 < 2 + |x_i|."""
    x = sp.csr_matrix(([-3.0], ([0], [7])), shape=(1, 1000))
    y = sp.csr_matrix(([2.0], ([0], [500])), shape=(1, 1000))
    X = sp.vstack([x, y]).tocsr()
    f = embeddings.MaxPool(1000, 50, 4, seed=0)
    assert f.embed(x).nnz == 0
    est, true = _ratios(X, f, 50, math.inf)
    assert true[0] == 3.0 and est[0] == 2.0


def test_birthday_formula_and_measured_share():
    assert embeddings.birthday_exact(1, 5) == 1.0 and embeddings.birthday_exact(3, 3) == pytest.approx(2 / 9)
    X = data.random_sparse(3000, 1_000_000, 5, seed=2)
    (row,) = measure.birthday(X, [30], seed=1)
    assert row["predicted"] == pytest.approx(np.prod(1 - np.arange(5) / 30))
    assert abs(row["measured"] - row["predicted"]) < 0.03


def test_nnls_recovers_sparse_non_negative_vectors():
    x = data.random_sparse(1, 300, 4, seed=1).toarray()[0]
    A = embeddings.gaussian_measurements(60, 300, seed=2)
    assert (A[0] >= 0).all()
    assert np.allclose(embeddings.nnls_decode(A, A @ x), x, atol=1e-8)
    rows = measure.cs_recovery(4, 300, 4, 128, vectors=10, tolerance=1e-6, seed=0)
    assert rows[0]["recovered"] < 0.99 <= rows[-1]["recovered"]  # too few measurements fail, enough succeed
    assert all(len(r["ok"]) == 10 and r["recovered"] == np.mean(r["ok"]) for r in rows)  # per vector, for intervals
    assert [r["m"] for r in rows] == sorted(r["m"] for r in rows)


def test_dimension_formulas_follow_the_bounds():
    m, t = embeddings.lp_dims(s=10, n=100, eps=0.1, c_m=4, c_t=1)
    assert (m, t) == (400, math.ceil(math.log(1000) / 0.1))
    m2, t2 = embeddings.lp_dims(s=10, n=100, eps=0.05, c_m=4, c_t=1)
    assert m2 * t2 == pytest.approx(4 * m * t, rel=0.01)  # halving eps: 4x the dimension
    q = embeddings.isolation_failure(8, 32)
    assert embeddings.linf_reps(8, 1000, 32, 0.1) > embeddings.linf_reps(8, 100, 32, 0.1)  # log |X| growth
    assert q == pytest.approx(1 - (31 / 32) ** 15)


def test_measure_helpers():
    per_rep = np.array([[1.0, 3.0, 2.0], [2.0, 2.0, 1.0], [1.0, 1.0, 1.0]])  # pair 3 never reaches its 2.0
    frac = measure.exact_by_reps(per_rep.max(axis=1), per_rep.argmax(axis=1), np.array([3.0, 2.0, 2.0]), 3)
    assert frac.tolist() == pytest.approx([1 / 3, 2 / 3, 2 / 3]) and measure.smallest_exact_t(frac) is None
    frac = measure.exact_by_reps(per_rep[:2].max(axis=1), per_rep[:2].argmax(axis=1), np.array([3.0, 2.0]), 3)
    assert frac.tolist() == [0.5, 1.0, 1.0] and measure.smallest_exact_t(frac) == 2
    assert measure.smallest_exact_t(np.array([0.5, 0.9])) is None
    rows = [{"m": 10, "f": 0.5}, {"m": 40, "f": 1.0}]
    assert measure.m_at(rows, "f", 0.75) == pytest.approx(20.0)
    assert math.isnan(measure.m_at([{"m": 10, "f": 0.5}], "f"))
    assert measure.loglog_slope([1, 2, 4], [1, 4, 16]) == pytest.approx(2.0)
    assert math.isnan(measure.loglog_slope([1, 2, 4], [1, 4, float("nan")]))  # not dropped: no slope
    assert measure.distortion(np.array([0.9, 1.0]))["distortion"] == pytest.approx(0.1)


def test_downstream_geometry():
    pts = np.array([[0.0], [1.0], [10.0], [11.0], [5.0]])
    n = len(pts)
    ia, ib = geometry.all_pairs(n)
    D = geometry.square(np.abs(pts[ia, 0] - pts[ib, 0]), n)
    assert geometry.diameter(np.abs(pts[ia, 0] - pts[ib, 0]))[0] == 11.0
    centers = geometry.k_center(D, 3)
    assert centers.tolist() == [0, 3, 4] and geometry.k_center_cost(D, centers) == 1.0
