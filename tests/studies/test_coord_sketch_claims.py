"""coord_sketch claims on negative controls: each claim is fed the input that should make it fail
(no effect, shuffled method labels, a biased estimator in place of the method, errors that do not
fall with k) and must come out False or inconclusive; on the real thing, where the effect is
certain at this size, it must not come out False. Sweeps run serially here (no Ray), through the
same sketches and the same summaries as run.py."""
import copy

import numpy as np
import pytest

from iclr_ray.studies.coord_sketch import analysis, data, sketches
from iclr_ray.studies.coord_sketch.config import PRESETS, Config

METHODS = ["priority", "threshold", "jl", "countsketch"]
BUDGETS = [2, 4, 8]
SEEDS = 8


def sweep(pair, estimator=None, budgets=BUDGETS, seeds=SEEDS, methods=METHODS, keep_w=False):
    """Records as run.measure makes them (one per method, budget and shared seed)."""
    exact, (fa, fb) = pair.exact(), pair.fro()
    out = []
    for method in methods:
        for rows in budgets:
            k_a, k_b = sketches.size_for(method, pair.A, rows), sketches.size_for(method, pair.B, rows)
            for i in range(seeds):
                sa = sketches.sketch(method, pair.A, pair.keys_a, k_a, 1000 + i)
                sb = sketches.sketch(method, pair.B, pair.keys_b, k_b, 1000 + i)
                W = (estimator or sketches.estimate)(sa, sb)
                rec = {"method": method, "sketch_rows": rows, "k_a": k_a, "k_b": k_b, "seed": i,
                       "error": sketches.relative_error(W, exact, fa, fb), "storage": sa.storage + sb.storage}
                if keep_w:
                    rec["W"] = W
                out.append(rec)
    return out


def uncorrected(sa, sb):
    """The sampling estimator without its 1/p correction: biased towards zero."""
    if isinstance(sa, sketches.LinearSketch):
        return sketches.estimate(sa, sb)
    _, ia, ib = np.intersect1d(sa.keys, sb.keys, assume_unique=True, return_indices=True)
    return np.asarray((sa.rows[ia].T @ sb.rows[ib]).todense())


def relabel(rows, mapping):
    """Method labels swapped (sampling <-> linear): a shuffled-label control."""
    return [{**r, "method": mapping.get(r["method"], r["method"])} for r in rows]


SWAP = {"priority": "jl", "threshold": "countsketch", "jl": "priority", "countsketch": "threshold"}


@pytest.fixture(scope="module")
def pairs():
    return {"sparse": data.sparse_pair(n=20000, d=200, m=200, nnz=5, overlap=0.3, tail=1.5, seed=0),
            "dense": data.sparse_pair(n=1500, d=30, m=30, nnz=30, overlap=1.0, tail=None, seed=1),
            "unbiased": data.sparse_pair(n=2000, d=10, m=10, nnz=5, overlap=0.3, tail=1.5, seed=2)}


@pytest.fixture(scope="module")
def metrics(pairs):
    """Metrics shaped as run.run returns them, from small serial sweeps."""
    m = {"sparse": analysis.summarise(sweep(pairs["sparse"])), "dense": analysis.summarise(sweep(pairs["dense"]))}
    u = pairs["unbiased"]
    m["unbiased"] = analysis.unbiasedness(sweep(u, budgets=[4], seeds=60, methods=["priority", "threshold"],
                                                keep_w=True), u.exact(), *u.fro())
    products = []
    for name, product in (("qk", "qk"), ("pv", "pv")):
        p = data.attention_pair(256, 16, 1.5, product, 3)
        products.append({"product": name, "layer": None, "head": None, **analysis.pair_stats(p),
                         "rows": analysis.summarise(sweep(p))})
    m["attention"] = {"source": "synthetic", "seq_len": 256, "products": products}
    t = data.synthetic_tables(4000, 3, 0.5, 0.4, 0.5, seed=4)
    pair, Xj, yj = data.regression_pair(t), *data.join(t)
    theta = data.solve(Xj.T @ Xj, Xj.T @ yj, 0.0)
    recs = sweep(pair, keep_w=True)
    for r in recs:
        th = data.solve(*data.normal_equations(r.pop("W"), 4), 1e-6)
        r["theta_error"] = float(np.linalg.norm(th - theta) / np.linalg.norm(theta))
        r["r2"] = 0.0
    m["regression"] = {"source": "synthetic", "join_rows": len(yj), "keys_x": 2000, "keys_y": 1600, "r2_exact": 1.0,
                       "rows": analysis.summarise(recs, extra=("theta_error", "r2"))}
    m["exact_at_full_size"] = {"priority": 0.0, "threshold": 0.0}
    return m


CFG = Config.model_validate(PRESETS["smoke"])


def verdicts(metrics):
    return {c.id: c for c in analysis.claims(metrics, CFG)}


def test_every_claim_has_an_interval_over_seeds_and_its_unit_count(metrics):
    got = verdicts(metrics)
    claims = [c for c in got.values() if not c.check]
    assert {c.id for c in claims} == {"sparse_advantage", "dense_control", "attention_qk_advantage",
                                      "attention_pv_advantage", "regression_advantage", "regression_coefficients",
                                      "second_moment_bound", "unbiased_priority", "unbiased_threshold",
                                      "rate_priority", "rate_threshold"}
    for c in claims:
        assert c.ci is not None and c.ci[0] <= c.measured <= c.ci[1], c
        assert c.n == (30 if c.id.startswith("unbiased") else SEEDS), c
    assert got["exact_at_full_size"].check and got["exact_at_full_size"].holds is True


def test_the_effects_that_exist_at_this_size_do_not_come_out_false(metrics):
    got = verdicts(metrics)
    assert got["sparse_advantage"].holds is True and got["sparse_advantage"].ci[0] > 10
    assert got["dense_control"].holds is not False
    assert got["second_moment_bound"].holds is not False
    assert got["unbiased_priority"].holds is not False and got["unbiased_threshold"].holds is not False


def test_advantage_claims_fail_on_inputs_without_the_effect(metrics):
    """Dense equal-norm rows in place of the sparse, attention and regression sweeps: no advantage."""
    no_effect = copy.deepcopy(metrics)
    no_effect["sparse"] = metrics["dense"]
    for p in no_effect["attention"]["products"]:
        p["rows"] = metrics["dense"]
    no_effect["regression"]["rows"] = [{**r, "theta_errors": r["errors"], "theta_error_mean": r["error_mean"]}
                                       for r in metrics["dense"]]
    got = verdicts(no_effect)
    for cid in ("sparse_advantage", "attention_qk_advantage", "attention_pv_advantage", "regression_advantage",
                "regression_coefficients"):
        assert got[cid].holds is False, got[cid]


def test_advantage_claims_fail_with_shuffled_method_labels(metrics):
    """Sampling and linear labels swapped: the 'advantage' is inverted and must not hold."""
    swapped = copy.deepcopy(metrics)
    swapped["sparse"] = relabel(metrics["sparse"], SWAP)
    for p in swapped["attention"]["products"]:
        p["rows"] = relabel(p["rows"], SWAP)
    swapped["regression"]["rows"] = relabel(metrics["regression"]["rows"], SWAP)
    got = verdicts(swapped)
    assert got["sparse_advantage"].holds is False and got["sparse_advantage"].measured < 1
    for cid in ("attention_qk_advantage", "attention_pv_advantage", "regression_advantage", "regression_coefficients"):
        assert got[cid].holds in (False, None), got[cid]


def test_dense_control_fails_where_an_advantage_exists(metrics):
    got = verdicts({**metrics, "dense": metrics["sparse"]})
    assert got["dense_control"].holds is False


def test_second_moment_bound_fails_for_a_biased_estimator(metrics):
    """Without the 1/p correction the mean squared error stays at the bias, above 2/(k - 1); the
    correct estimator on the same input stays below it."""
    # A = B of rank one: AᵀB is as large as it can be next to ||A||_F ||B||_F, so a shrunk estimate
    # is off by nearly all of it
    import scipy.sparse as sp

    rng = np.random.default_rng(5)
    A = sp.csr_matrix(np.outer(np.ones(1000), rng.standard_normal(20)))
    keys = np.arange(1000, dtype=np.int64)
    same = data.Pair(keys, A, keys, A)
    kw = dict(budgets=[8, 16], methods=["priority", "threshold"])
    biased = analysis.summarise(sweep(same, uncorrected, **kw))
    got = verdicts({**metrics, "sparse": biased, "dense": biased})
    assert got["second_moment_bound"].holds is False, got["second_moment_bound"]
    right = analysis.summarise(sweep(same, **kw))
    assert verdicts({**metrics, "sparse": right, "dense": right})["second_moment_bound"].holds is not False


def test_unbiased_claims_fail_for_a_biased_estimator(pairs, metrics):
    u = pairs["unbiased"]
    recs = sweep(u, uncorrected, budgets=[4], seeds=60, methods=["priority", "threshold"], keep_w=True)
    got = verdicts({**metrics, "unbiased": analysis.unbiasedness(recs, u.exact(), *u.fro())})
    for cid in ("unbiased_priority", "unbiased_threshold"):
        assert got[cid].holds is False, got[cid]


def test_rate_claims_fail_when_the_error_does_not_fall_with_k(metrics):
    """Errors that do not depend on the sketch size (the smallest budget's, labelled with every k)."""
    flat = []
    for r in metrics["sparse"]:
        first = next(x for x in metrics["sparse"] if x["method"] == r["method"] and x["sketch_rows"] == BUDGETS[0])
        flat.append({**r, "errors": list(np.asarray(first["errors"])[np.random.default_rng(r["sketch_rows"]).permutation(SEEDS)])})
    got = verdicts({**metrics, "sparse": flat})
    for cid in ("rate_priority", "rate_threshold"):
        assert got[cid].holds in (False, None), got[cid]
        assert got[cid].ci[0] > -0.35 or got[cid].holds is None


def test_the_full_size_check_fails_when_the_product_is_not_exact(metrics):
    got = verdicts({**metrics, "exact_at_full_size": {"priority": 0.0, "threshold": 1e-3}})
    assert got["exact_at_full_size"].holds is False


def test_claims_and_report_are_pure_functions_of_json_metrics(metrics):
    import json

    back = json.loads(json.dumps(metrics))
    assert [c.to_dict() for c in analysis.claims(back, CFG)] == [c.to_dict() for c in analysis.claims(metrics, CFG)]
    md = analysis.report_md(back, CFG)
    assert "### Second moment" in md and "bias share of the MSE" in md and "#### QᵀK" in md
