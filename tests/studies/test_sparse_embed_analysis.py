"""sparse_embed's claims on metrics measured here without Ray (the study's own measurement
functions on small real maps), and each claim on a negative control: the linear map in place of
max-pooling, non-negative data in place of signed, too few repetitions, a dimension that does not
grow, a decoder that needs s² measurements. A control must come out False or inconclusive."""
import math

import numpy as np
import pytest

from iclr_ray.claims import Claim
from iclr_ray.studies.sparse_embed import analysis, data, embeddings, geometry, measure
from iclr_ray.studies.sparse_embed.config import Config

PS = (1.0, 2.0, 8.0, 16.0, math.inf)
EPS = (0.4, 0.2)
SEEDS = 5


def _estimates(X, spec, ia, ib, ps):
    per = geometry.pair_distances(spec.embed(X), ia, ib, ps, spec.m)
    return {p: embeddings.estimate(v, p) for p, v in per.items()}, per


def _lp(X, ps=PS):
    """lp rows and estimates for both maps, every eps and seed, as run.lp_experiment builds them."""
    n, d, s = X.shape[0], X.shape[1], data.sparsity(X)
    ia, ib = geometry.all_pairs(n)
    true = geometry.norms(geometry.pair_distances(X, ia, ib, ps))
    rows, estimates = [], {}
    for seed in range(SEEDS):
        for eps in EPS:
            m, t = embeddings.lp_dims(s, n, eps, 4.0, 1.0)
            for name, cls in (("maxpool", embeddings.MaxPool), ("linear", embeddings.CountSketch)):
                est, _ = _estimates(X, cls(d, m, t, seed), ia, ib, ps)
                estimates[(name, eps, seed)] = est
                rows += [measure.lp_row(name, eps, seed, m, t, p, est[p], true[p]) for p in ps]
    return rows, estimates, true


def _linf(sizes, seeds, t_of=None):
    """linf rows as run.linf_experiment builds them (t_of(t_pred): the repetitions used instead)."""
    X = data.random_sparse(max(sizes), 1_000_000, 8, seed=11)
    s, m = 8, 32
    rows = []
    for size in sizes:
        ia, ib = geometry.all_pairs(size)
        true = geometry.norms(geometry.pair_distances(X[:size], ia, ib, (math.inf,)))[math.inf]
        t_pred = embeddings.linf_reps(s, size, m, 0.1)
        t_use = t_pred if t_of is None else t_of(t_pred)
        for seed in range(seeds):
            est, per = _estimates(X[:size], embeddings.MaxPool(1_000_000, m, t_use + 2, 100 + seed), ia, ib, (math.inf,))
            lin, _ = _estimates(X[:size], embeddings.CountSketch(1_000_000, m, t_use, 100 + seed), ia, ib, (math.inf,))
            rows.append(measure.linf_row(size, seed, m, t_use, est[math.inf], per[math.inf].argmax(axis=1), t_use + 2,
                                         true, lin[math.inf]))
    return rows


@pytest.fixture(scope="module")
def metrics():
    X = data.random_sparse(40, 100_000, 8, seed=0, clusters=4)
    rows, estimates, true = _lp(X)
    n, s = X.shape[0], data.sparsity(X)
    ia, ib = geometry.all_pairs(n)
    m_s, t_s = embeddings.lp_dims(s, n, max(EPS), 4.0, 1.0)
    signed = []
    m_inf = 4 * s
    t_inf = embeddings.linf_reps(s, n, m_inf, 0.1)
    for seed in range(SEEDS):
        S = data.signed(X, seed=7 + seed)
        true_s = geometry.norms(geometry.pair_distances(S, ia, ib, PS))
        est, _ = _estimates(S, embeddings.MaxPool(X.shape[1], m_s, t_s, seed), ia, ib, PS)
        signed += [measure.lp_row("maxpool", max(EPS), seed, m_s, t_s, p, est[p], true_s[p]) for p in PS]
        estimates[("maxpool_linf", None, seed)] = _estimates(X, embeddings.MaxPool(X.shape[1], m_inf, t_inf, seed),
                                                             ia, ib, (math.inf,))[0]
    cs = [{"s": s_, **r} for s_ in (4, 8, 16) for r in measure.cs_recovery(s_, 256, 8, 256, 20, 1e-6, seed=s_)]
    birthday = [{"s": s_, "ratio": r["m"] / s_**2, **r}
                for s_ in (4, 8) for r in measure.birthday(data.random_sparse(1000, 100_000, s_, seed=s_),
                                                           sorted({round(x * s_ * s_) for x in (1, 5, 20, 50, 100, 200)}),
                                                           seed=1)]
    return {"data": {"n": n, "d": X.shape[1], "s": s, "nnz": X.nnz, "source": "generated", "memory_mb": 0.0},
            "lp": {"rows": rows, "signed": {"m": m_s, "t": t_s, "eps": max(EPS), "rows": signed},
                   "downstream": measure.downstream(true, estimates, n, 4),
                   "linf_map": {"m": m_inf, "t": t_inf, "seeds": []}},
            "linf": _linf([16, 32, 64], 12), "birthday": birthday, "cs": cs}


def verdicts(metrics, cfg=Config()):
    items = analysis.claims(metrics, cfg)
    return {c.id: c for c in items}


def with_lp(metrics, **parts):
    return {**metrics, "lp": {**metrics["lp"], **parts}}


def test_claims_hold_on_the_measured_maps_and_checks_are_apart(metrics):
    got = verdicts(metrics)
    claims = [c for c in got.values() if not c.check]
    assert {c.id for c in claims} == {"lp_within_eps", "linf_exact", "linf_log_tight", "linear_not_exact",
                                      "signed_fails", "cs_beats_s_squared", "diameter_lp"}
    assert {c.id for c in got.values() if c.check} == {"one_sided", "lp_dims_law", "birthday_curve",
                                                       "birthday_s_squared", "diameter_exact_linf",
                                                       "k_center_linf_same"}
    for c in claims:
        assert c.ci is not None and c.n >= 2, c.id  # every claim has an interval over its units
    assert got["lp_within_eps"].n == SEEDS and got["linf_exact"].n == 36 and got["cs_beats_s_squared"].n == 20
    for cid in ("lp_within_eps", "linf_exact", "linear_not_exact", "signed_fails", "cs_beats_s_squared",
                "diameter_lp", "one_sided", "diameter_exact_linf", "k_center_linf_same"):
        assert got[cid].holds is True, (cid, got[cid])


def test_lp_within_eps_fails_for_the_linear_map(metrics):
    """Large p tells the maps apart: a sum of colliding coordinates exceeds both of them."""
    linear_as_method = [{**r, "method": "maxpool"} for r in metrics["lp"]["rows"] if r["method"] == "linear"]
    c = verdicts(with_lp(metrics, rows=linear_as_method))["lp_within_eps"]
    assert c.holds is False and c.ci[0] > 1
    finite_small_p = [r for r in linear_as_method if r["p"] in ("1", "2")]
    assert analysis.lp_within_eps(finite_small_p).value < 1  # why p = 1, 2 alone could not tell them apart


def test_diameter_lp_fails_for_the_linear_map(metrics):
    diam = metrics["lp"]["downstream"]["diameter"]
    linear = [{**r, "map": "maxpool"} for r in diam if r["map"] == "linear"]
    down = {**metrics["lp"]["downstream"], "diameter": linear + [r for r in diam if r["map"] == "maxpool_linf"]}
    assert verdicts(with_lp(metrics, downstream=down))["diameter_lp"].holds is False


def test_signed_fails_does_not_hold_on_non_negative_data(metrics):
    unsigned = [r for r in metrics["lp"]["rows"] if r["method"] == "maxpool" and r["eps"] == max(EPS)]
    c = verdicts(with_lp(metrics, signed={**metrics["lp"]["signed"], "rows": unsigned}))["signed_fails"]
    assert c.measured == 0 and c.holds is False


def test_linf_exact_fails_with_one_repetition():
    rows = _linf([16, 32], 6, t_of=lambda t: 1)
    c = analysis.linf_exact_share(rows)
    assert c.value == 0 and c.n == 12
    assert Claim.at_least("linf_exact", "", c, 0.9, source="ours").holds is False  # the bound claims() uses: 1 - delta


def test_linf_log_tight_fails_for_a_dimension_that_does_not_grow(metrics):
    flat = [{**r, "t_min": 6} for r in metrics["linf"]]
    assert verdicts({**metrics, "linf": flat})["linf_log_tight"].holds is False
    # and for one that grows like |X| rather than log |X|
    linear_growth = [{**r, "t_min": r["size"] // 4} for r in metrics["linf"]]
    assert verdicts({**metrics, "linf": linear_growth})["linf_log_tight"].holds is False
    logarithmic = [{**r, "t_min": round(1.2 * math.log(r["pairs"]))} for r in metrics["linf"]]
    assert verdicts({**metrics, "linf": logarithmic})["linf_log_tight"].holds is True


def test_linear_not_exact_fails_for_the_max_pooling_map(metrics):
    maxpool_share = [{**r, "linear_exact_fraction": r["exact_by_t"][r["t_pred"] - 1]} for r in metrics["linf"]]
    assert verdicts({**metrics, "linf": maxpool_share})["linear_not_exact"].holds is False


def test_cs_claim_fails_for_a_decoder_that_needs_s_squared(metrics):
    rng = np.random.default_rng(0)
    quadratic = []
    for s in (4, 8, 16):
        need = 0.7 * s * s * np.exp(0.2 * rng.standard_normal(20))  # vector k needs m >= need[k]
        for m in sorted({int(round(16 * math.sqrt(2) ** i)) for i in range(14)}):
            ok = (m >= need).tolist()
            quadratic.append({"s": s, "m": m, "recovered": float(np.mean(ok)), "ok": ok})
            if np.mean(ok) >= 0.99:
                break
    c = verdicts({**metrics, "cs": quadratic})["cs_beats_s_squared"]
    assert c.holds is False and 1.7 < c.measured < 2.3


def test_an_unreached_point_makes_a_slope_nan_not_a_shorter_fit(metrics):
    assert measure.loglog_slope([1, 2, 4], [1, 4, float("nan")]) != measure.loglog_slope([1, 2], [1, 4])
    assert math.isnan(measure.loglog_slope([1, 2, 4], [1, 4, float("nan")]))
    assert measure.unmeasured([1.0, float("nan"), None, 0.0]) == 3
    cs = [r for r in metrics["cs"] if not (r["s"] == 16 and r["recovered"] >= 0.99)]  # s = 16 never reaches 99%
    c = verdicts({**metrics, "cs": cs})["cs_beats_s_squared"]
    assert math.isnan(c.measured) and c.holds is None and "not reached within m_max for s = [16]" in c.note
    bd = [r for r in metrics["birthday"] if not (r["s"] == 8 and r["measured"] >= 0.99)]
    chk = verdicts({**metrics, "birthday": bd})["birthday_s_squared"]
    assert chk.check and chk.holds is False and "1 of 2 not measured" in chk.note
