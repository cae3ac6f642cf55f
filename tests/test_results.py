import json
import math

import pytest

import numpy as np

from iclr_ray.claims import (Claim, Estimate, bootstrap, checks_table, claims_table, exact, mean, paired_difference,
                             proportion, split, summary_line)
from iclr_ray.results import RunDir, RunDirError, atomic_write_text


def E(lo, hi, value=None, n=10):
    """An estimate with interval [lo, hi]."""
    return Estimate((lo + hi) / 2 if value is None else value, (lo, hi), n)


def test_verdicts_are_judged_on_the_whole_interval():
    assert Claim.at_least("a", "s", E(10.5, 14), 10, source="ours").holds is True
    assert Claim.at_least("a", "s", E(8, 9.9), 10, source="ours").holds is False
    assert Claim.at_least("a", "s", E(9, 12), 10, source="ours").holds is None  # straddles: inconclusive
    assert Claim.at_most("a", "s", E(0.5, 1.5), 2, source="ours").holds is True and Claim.at_most("a", "s", E(2.1, 3), 2, source="ours").holds is False
    assert Claim.at_most("a", "s", E(1.5, 2.5), 2, source="ours").holds is None
    assert Claim.within("a", "s", E(-0.6, -0.4), -0.65, -0.35, source="ours").holds is True
    assert Claim.within("a", "s", E(-0.9, -0.7), -0.65, -0.35, source="ours").holds is False
    assert Claim.within("a", "s", E(-0.1, 0.2), -0.65, -0.35, source="ours").holds is False  # all above
    assert Claim.within("a", "s", E(-0.7, -0.5), -0.65, -0.35, source="ours").holds is None
    assert Claim.within("a", "s", E(-0.9, 0.0), -0.65, -0.35, source="ours").holds is None  # wider than the band
    # a deterministic value is a point; a value not measured fails when exact, is inconclusive when noisy
    assert Claim.at_least("a", "s", exact(12.0), 10, source="ours").holds is True and Claim.at_least("a", "s", exact(9), 10, source="ours").holds is False
    assert Claim.at_least("a", "s", exact(float("nan")), 0, source="ours").holds is False
    assert Claim.at_least("a", "s", mean([]), 0, source="ours").holds is None
    # "raises": strictly above the bound, so a gain of exactly zero on every unit does not hold
    assert Claim.at_least("a", "s", mean([0.0, 0.0, 0.0]), 0, source="ours").holds is True
    assert Claim.above("a", "s", mean([0.0, 0.0, 0.0]), 0, source="ours").holds is False
    assert Claim.above("a", "s", E(0.0, 0.3), 0, source="ours").holds is None and Claim.above("a", "s", E(0.01, 0.3), 0, source="ours").holds is True
    assert Claim.above("a", "s", E(-0.2, -0.1), 0, source="ours").bound == "> 0"


def test_a_claim_needs_an_estimate_and_a_check_may_take_a_number():
    with pytest.raises(TypeError, match="judged on an Estimate"):
        Claim.at_least("a", "s", 12.0, 10)
    c = Claim.at_most("e", "energy never decreases", 0.0, 1e-8, check=True)
    assert c.holds is True and c.check and c.ci is None and c.n == 1


def test_interval_helpers_cover_what_they_should():
    rng = np.random.default_rng(0)
    # the t interval of a mean covers the true mean about 95% of the time
    hits = [mean(rng.normal(1.0, 2.0, 12)).ci for _ in range(2000)]
    assert 0.93 < np.mean([lo <= 1.0 <= hi for lo, hi in hits]) < 0.97
    # Wilson: inside [0, 1], not degenerate at 0 or n successes
    p = proportion(0, 20)
    assert p.value == 0 and p.ci[0] == 0 and 0.1 < p.ci[1] < 0.2 and proportion(20, 20).ci[1] == 1
    assert proportion(7, 20).ci == pytest.approx((0.181, 0.567), abs=2e-3)  # the textbook Wilson interval
    # paired: a shared offset cancels; unpaired draws of the same size would not
    base = rng.normal(0, 5, 40)
    d = paired_difference(base + 0.3 + rng.normal(0, 0.01, 40), base)
    assert d.n == 40 and 0.29 < d.ci[0] < 0.3 < d.ci[1] < 0.31
    with pytest.raises(ValueError, match="same shape"):
        paired_difference([1, 2], [1])
    # bootstrap of a ratio of means over paired units
    a, b = rng.normal(10, 1, 30), rng.normal(5, 1, 30)
    r = bootstrap((a, b), lambda x, y: x.mean() / y.mean())
    assert r.n == 30 and r.ci[0] < 2 < r.ci[1] and r.ci[1] - r.ci[0] < 0.6
    assert bootstrap(a[:1], np.mean).ci == (-math.inf, math.inf)  # one unit cannot bound anything
    assert bootstrap(a, lambda x: float("nan")).ci == (-math.inf, math.inf)


def test_claims_on_their_bound_hold_in_floats_too():
    assert 0.15 - 0.05 < 0.1 and Claim.at_least("a", "s", exact(0.15 - 0.05), 0.1, source="ours").holds
    assert 0.25 - 0.35 > -0.1 and Claim.at_most("a", "s", exact(0.25 - 0.35), -0.1, source="ours").holds
    assert Claim.within("a", "s", exact(0.7 - 0.6), 0.1, 0.2, source="ours").holds
    assert Claim.within("a", "s", exact(0.1 + 0.2), 0.1, 0.3, source="ours").holds
    # the tolerance is relative, far below any real difference
    assert not Claim.at_least("a", "s", exact(0.1 - 1e-6), 0.1, source="ours").holds
    assert not Claim.at_most("a", "s", exact(1e6 + 1), 1e6, source="ours").holds


def test_claim_json_round_trip_and_tables():
    c = Claim.at_most("x", "stmt", mean([float("nan")]), 1, note="n", source="ours")
    d = c.to_dict()
    assert d["measured"] is None and d["ci"] == [None, None] and json.dumps(d)
    back = Claim.from_dict(d)
    assert math.isnan(back.measured) and back.ci == (-math.inf, math.inf) and back.holds is None and back.note == "n"
    y = Claim.at_least("y", "t", E(2.5, 3.5, 3.0, n=7), 2, source="paper")
    assert Claim.from_dict(y.to_dict()) == y
    z = Claim.at_least("z", "u", E(0.0, 1.0), 2, source="paper-read")
    table = claims_table([c, y, z])
    assert "| `x` | stmt (n) | n/a | unbounded | 0 | <= 1 | ours | inconclusive |" in table
    assert "| `y` | t | 3 | [2.5, 3.5] | 7 | >= 2 | paper | yes |" in table
    assert "| `z` | u | 0.5 | [0, 1] | 10 | >= 2 | paper-read | **no** |" in table
    chk = Claim.at_most("k", "identity", 0.0, 1e-12, check=True)
    assert "| `k` | identity | 0 | <= 1e-12 | yes |" in checks_table([chk])
    assert split([c, chk, y]) == ([c, y], [chk])
    assert summary_line([c, y, z], [chk]) == "1 of 3 claims held, 1 did not, 1 inconclusive; 1 of 1 checks passed"


def test_a_claim_says_where_its_bound_comes_from():
    """Every paper claim names its bound's source (result.json and the report carry it); a check's
    bound is this project's own."""
    with pytest.raises(ValueError, match="source"):
        Claim.at_least("a", "s", exact(1.0), 0.5)
    with pytest.raises(ValueError, match="paper, paper-read, ours"):
        Claim.at_least("a", "s", exact(1.0), 0.5, source="folklore")
    assert Claim.at_least("a", "s", exact(1.0), 0.5, source="paper-read").to_dict()["source"] == "paper-read"
    assert Claim.at_least("k", "s", 1.0, 0.5, check=True).source == "ours"
    assert Claim.from_dict({"id": "old", "statement": "s", "measured": 1.0, "bound": ">= 0", "holds": True}).source \
        == "unstated"  # a result.json written before sources were recorded


def test_atomic_write_leaves_no_temporaries(tmp_path):
    atomic_write_text(tmp_path / "a.txt", "one")
    atomic_write_text(tmp_path / "a.txt", "two")
    assert (tmp_path / "a.txt").read_text() == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_run_dir_contract(tmp_path):
    rd = RunDir(tmp_path / "run").create()
    rd.write_config("seed: 1\n")
    rd.log({"step": 1, "loss": 0.5})
    rd.log({"step": 2, "loss": 0.25})
    assert rd.read_metrics() == [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.25}]
    with pytest.raises(RunDirError, match="no result.json"):
        rd.read_result()
    result = {"study": "s", "preset": "smoke", "config": {}, "metrics": {}, "seconds": 1.0, "env": {"cpus": 2},
              "claims": [Claim.at_least("c", "stmt", E(1.5, 2.5), 1, source="ours").to_dict()],
              "checks": [Claim.at_most("k", "an identity", 0.0, 1e-9, check=True).to_dict()]}
    rd.write_result(result)
    assert rd.read_result() == result
    text = rd.write_report(result, "Title")
    assert "1 of 1 claims held, 0 did not, 0 inconclusive; 1 of 1 checks passed" in text
    assert "| `c` |" in text and "## Checks" in text and "| `k` | an identity |" in text
    with pytest.raises(RunDirError, match="already holds a finished run"):
        RunDir(tmp_path / "run").create()


def test_non_finite_numbers_are_written_as_null(tmp_path):
    # JSON has no NaN or infinity; a value that could not be measured reads as null
    rd = RunDir(tmp_path / "run").create()
    rd.write_result({"x": float("nan"), "y": [1.0, float("inf")], "z": {"w": -float("inf"), "v": 2}})
    assert rd.read_result() == {"x": None, "y": [1.0, None], "z": {"w": None, "v": 2}}


def test_a_cluster_bootstrap_resamples_shared_units_together():
    """Rows that share a context vary together: resampling rows alone understates the interval
    (24 contexts of 10 rows each, the context effect dominating), resampling contexts does not, and
    the estimate rests on the 24 contexts."""
    rng = np.random.default_rng(0)
    ctx = np.repeat(np.arange(24), 10)
    x = rng.normal(0, 1, 24)[ctx] + rng.normal(0, 0.1, len(ctx))
    rows, by_ctx = bootstrap(x, np.mean), bootstrap(x, np.mean, clusters=ctx)
    assert rows.value == by_ctx.value and rows.n == 240 and by_ctx.n == 24
    width = lambda e: e.ci[1] - e.ci[0]  # noqa: E731
    assert width(by_ctx) > 2.5 * width(rows)
    assert by_ctx.ci[0] < 0 < by_ctx.ci[1]  # the 24 context means straddle 0; the rows' interval says otherwise
    assert not rows.ci[0] < 0 < rows.ci[1]
    assert bootstrap(x[:10], np.mean, clusters=ctx[:10]).ci == (-math.inf, math.inf)  # one context bounds nothing
    with pytest.raises(ValueError, match="label per row"):
        bootstrap(x, np.mean, clusters=ctx[:5])


def test_a_rate_whose_interval_cannot_reach_its_bound_gets_no_verdict():
    """At n = 12 even 12 successes give a Wilson lower end of 0.76: a ">= 0.95" claim on 12 units
    can never hold, so it says so rather than reading as an inconclusive that data could resolve;
    a rate clearly below the bound still fails, and with enough units the claim can hold."""
    c = Claim.at_least("a", "s", proportion(12, 12), 0.95, source="ours")
    assert c.holds is None and "no verdict possible: 12 units" in c.note
    assert Claim.at_least("a", "s", proportion(5, 12), 0.95, source="ours").holds is False
    assert Claim.at_least("a", "s", proportion(80, 80), 0.95, source="ours").holds is True
    assert "no verdict" in Claim.at_most("a", "s", proportion(0, 12), 0.1, source="ours").note
    assert Claim.at_most("a", "s", proportion(0, 40), 0.1, source="ours").holds is True
    assert "no verdict" not in Claim.at_least("a", "s", mean([1.0] * 12), 0.95, source="ours").note  # not a rate
