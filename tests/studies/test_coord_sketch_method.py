"""The sketches and estimators of coord_sketch, on random inputs (no Ray)."""
import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from iclr_ray.studies.coord_sketch import data, sketches
from iclr_ray.studies.coord_sketch.sketches import METHODS, SAMPLING


@pytest.fixture(scope="module")
def pair():
    return data.sparse_pair(n=3000, d=12, m=9, nnz=4, overlap=0.4, tail=1.5, seed=3)


def run_seeds(pair, method, rows, seeds):
    if method in SAMPLING:
        k_a = sketches.sampling_size(pair.A, rows * pair.A.shape[1])
        k_b = sketches.sampling_size(pair.B, rows * pair.B.shape[1])
    else:
        k_a = k_b = rows
    Ws = [sketches.estimate(sketches.sketch(method, pair.A, pair.keys_a, k_a, s),
                            sketches.sketch(method, pair.B, pair.keys_b, k_b, s)) for s in range(seeds)]
    return np.stack(Ws), k_a


def test_uniform_hash_is_shared_uniform_and_seeded():
    keys = np.arange(20000, dtype=np.int64)
    u = sketches.uniform_hash(keys, seed=5)
    assert np.array_equal(u, sketches.uniform_hash(keys.copy(), seed=5))  # same key, same seed, same value
    assert np.array_equal(u[::-1], sketches.uniform_hash(keys[::-1], seed=5))  # depends on the key only
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    assert not np.allclose(u, sketches.uniform_hash(keys, seed=6))
    assert 0.0 < u.min() and u.max() < 1.0


def test_each_party_sketch_depends_only_on_its_own_rows(pair):
    """The sketch of A is the same whatever B is: the parties never exchange data."""
    for method in METHODS:
        s1 = sketches.sketch(method, pair.A, pair.keys_a, 8, seed=11)
        s2 = sketches.sketch(method, pair.A.copy(), pair.keys_a.copy(), 8, seed=11)
        if method in SAMPLING:
            assert np.array_equal(s1.keys, s2.keys) and (s1.rows != s2.rows).nnz == 0
        else:
            assert np.array_equal(s1.SA, s2.SA)


def test_priority_keeps_exactly_k_rows_and_threshold_at_most_k_expected(pair):
    ps = sketches.priority_sketch(pair.A, pair.keys_a, 50, seed=1)
    assert len(ps.keys) == 50 and np.all(np.diff(ps.keys) > 0)
    sizes = [len(sketches.threshold_sketch(pair.A, pair.keys_a, 50, seed=s).keys) for s in range(200)]
    w = sketches.row_norms2(pair.A)
    expected = np.minimum(1.0, 50 * w / w.sum()).sum()
    assert expected <= 50
    assert abs(np.mean(sizes) - expected) < 4 * np.sqrt(expected / 200) + 0.5


def test_coordination_keeps_shared_heavy_rows(pair):
    """A row heavy on both sides is kept by both parties: the shared hash coordinates them."""
    pa = sketches.priority_sketch(pair.A, pair.keys_a, 100, seed=2)
    pb = sketches.priority_sketch(pair.B, pair.keys_b, 100, seed=2)
    common = np.intersect1d(pa.keys, pb.keys).size
    # independent samples of 100 rows each out of ~2100 per side would share only a handful
    indep = [np.intersect1d(sketches.priority_sketch(pair.A, pair.keys_a, 100, seed=2).keys,
                            sketches.priority_sketch(pair.B, pair.keys_b, 100, seed=3 + s).keys).size
             for s in range(5)]
    assert common > 2 * np.mean(indep)


@pytest.mark.parametrize("method", METHODS)
def test_estimators_are_unbiased(pair, method):
    """mean_T W -> AᵀB: the squared error of the mean is E||W - AᵀB||² / T for an unbiased W."""
    T = 300
    Ws, _ = run_seeds(pair, method, rows=3, seeds=T)
    exact = pair.exact()
    per_seed = np.mean([np.linalg.norm(W - exact) ** 2 for W in Ws])
    ratio = np.linalg.norm(Ws.mean(0) - exact) ** 2 / (per_seed / T)
    assert ratio < 2.0


def test_a_biased_estimator_fails_the_same_check(pair):
    """The unbiasedness check can fail: dropping the 1/p correction is caught."""
    T = 300
    exact = pair.exact()
    Ws = []
    for s in range(T):
        sa = sketches.priority_sketch(pair.A, pair.keys_a, 30, s)
        sb = sketches.priority_sketch(pair.B, pair.keys_b, 30, s)
        _, ia, ib = np.intersect1d(sa.keys, sb.keys, return_indices=True)
        Ws.append(np.asarray((sa.rows[ia].T @ sb.rows[ib]).todense()))
    per_seed = np.mean([np.linalg.norm(W - exact) ** 2 for W in Ws])
    assert np.linalg.norm(np.mean(Ws, 0) - exact) ** 2 / (per_seed / T) > 5.0


@pytest.mark.parametrize("method", SAMPLING)
def test_frobenius_guarantee(pair, method):
    """With k samples, error <= sqrt(2/(delta (k-1))) ||A|| ||B|| in at least 1 - delta of the seeds."""
    delta = 0.1
    fa, fb = pair.fro()
    exact = pair.exact()
    for k in (10, 40):
        errs = [sketches.relative_error(
            sketches.estimate(sketches.sketch(method, pair.A, pair.keys_a, k, s),
                              sketches.sketch(method, pair.B, pair.keys_b, k, s)), exact, fa, fb)
            for s in range(100)]
        assert np.mean(np.array(errs) <= sketches.guarantee_eps(k, delta)) >= 1 - delta


@pytest.mark.parametrize("method", METHODS)
def test_error_falls_like_one_over_sqrt_k_on_equal_norms(method):
    pair = data.sparse_pair(n=4000, d=20, m=20, nnz=20, overlap=1.0, tail=None, seed=4)
    exact, (fa, fb) = pair.exact(), pair.fro()
    ks = [8, 32, 128]
    errs = []
    for k in ks:
        errs.append(np.mean([sketches.relative_error(
            sketches.estimate(sketches.sketch(method, pair.A, pair.keys_a, k, s),
                              sketches.sketch(method, pair.B, pair.keys_b, k, s)), exact, fa, fb)
            for s in range(20)]))
    slope = np.polyfit(np.log(ks), np.log(errs), 1)[0]
    assert -0.7 < slope < -0.3


def test_storage_is_counted_in_stored_numbers(pair):
    budget = 10 * pair.A.shape[1]
    k = sketches.sampling_size(pair.A, budget)
    for method in SAMPLING:
        sk = sketches.sketch(method, pair.A, pair.keys_a, k, seed=0)
        per_row = np.minimum(2 * np.diff(sk.rows.indptr), pair.A.shape[1]) + 1
        assert sk.storage == per_row.sum() + 1 <= budget
    for method in ("jl", "countsketch"):
        assert sketches.sketch(method, pair.A, pair.keys_a, 10, seed=0).storage == 10 * pair.A.shape[1]


def test_disjoint_keys_estimate_zero():
    A = sp.csr_matrix(np.ones((5, 3)))
    sa = sketches.sketch("priority", A, np.arange(5), 3, 0)
    sb = sketches.sketch("priority", A, np.arange(5, 10), 3, 0)
    assert np.array_equal(sketches.estimate(sa, sb), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="different kinds"):
        sketches.estimate(sa, sketches.sketch("jl", A, np.arange(5), 3, 0))
    with pytest.raises(ValueError, match="keys for"):
        sketches.sketch("jl", A, np.arange(4), 3, 0)


def test_sparse_advantage_shows_on_sparse_heavy_tailed_inputs():
    """The paper's point in miniature: at equal storage, sampling beats JL by a wide margin."""
    pair = data.sparse_pair(n=20000, d=200, m=200, nnz=5, overlap=0.3, tail=1.5, seed=0)
    exact, (fa, fb) = pair.exact(), pair.fro()
    rows = 8
    k_ps = sketches.sampling_size(pair.A, rows * 200)

    def err(method, k):
        return np.mean([sketches.relative_error(
            sketches.estimate(sketches.sketch(method, pair.A, pair.keys_a, k, s),
                              sketches.sketch(method, pair.B, pair.keys_b, k, s)), exact, fa, fb)
            for s in range(5)])

    assert err("jl", rows) > 3 * err("priority", k_ps)
