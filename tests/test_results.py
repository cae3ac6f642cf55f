import json
import math

import pytest

from iclr_ray.claims import Claim, claims_table, summary_line
from iclr_ray.results import RunDir, RunDirError, atomic_write_text


def test_claim_verdicts_follow_the_comparison():
    assert Claim.at_least("a", "s", 12.0, 10).holds
    assert not Claim.at_least("a", "s", 9.9, 10).holds
    assert Claim.at_most("a", "s", 1.0, 2).holds and not Claim.at_most("a", "s", 2.1, 2).holds
    assert Claim.within("a", "s", -0.5, -0.65, -0.35).holds
    assert not Claim.within("a", "s", -0.7, -0.65, -0.35).holds
    assert not Claim.at_least("a", "s", float("nan"), 0).holds  # a missing measurement never holds


def test_claims_on_their_bound_hold_in_floats_too():
    assert 0.15 - 0.05 < 0.1 and Claim.at_least("a", "s", 0.15 - 0.05, 0.1).holds
    assert 0.25 - 0.35 > -0.1 and Claim.at_most("a", "s", 0.25 - 0.35, -0.1).holds
    assert Claim.within("a", "s", 0.7 - 0.6, 0.1, 0.2).holds and Claim.within("a", "s", 0.1 + 0.2, 0.1, 0.3).holds
    # the tolerance is relative, far below any real difference
    assert not Claim.at_least("a", "s", 0.1 - 1e-6, 0.1).holds and not Claim.at_most("a", "s", 1e6 + 1, 1e6).holds


def test_claim_json_round_trip_and_table():
    c = Claim.at_most("x", "stmt", float("nan"), 1, note="n")
    d = c.to_dict()
    assert d["measured"] is None and json.dumps(d)
    back = Claim.from_dict(d)
    assert math.isnan(back.measured) and back.holds is False and back.note == "n"
    table = claims_table([c, Claim.at_least("y", "t", 3, 2)])
    assert "| `x` | stmt (n) | n/a | <= 1 | **no** |" in table and "| `y` | t | 3 | >= 2 | yes |" in table
    assert summary_line([c, Claim.at_least("y", "t", 3, 2)]) == "1/2 claims held"


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
              "claims": [Claim.at_least("c", "stmt", 2, 1).to_dict()]}
    rd.write_result(result)
    assert rd.read_result() == result
    text = rd.write_report(result, "Title")
    assert "1/1 claims held" in text and "| `c` |" in (rd.path / "report.md").read_text()
    with pytest.raises(RunDirError, match="already holds a finished run"):
        RunDir(tmp_path / "run").create()


def test_non_finite_numbers_are_written_as_null(tmp_path):
    # JSON has no NaN or infinity; a value that could not be measured reads as null
    rd = RunDir(tmp_path / "run").create()
    rd.write_result({"x": float("nan"), "y": [1.0, float("inf")], "z": {"w": -float("inf"), "v": 2}})
    assert rd.read_result() == {"x": None, "y": [1.0, None], "z": {"w": None, "v": 2}}
