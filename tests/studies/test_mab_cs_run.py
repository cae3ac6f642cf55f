"""mab_cs end to end: the smoke study on the session's Ray cluster (every experiment, claims,
plots, the real-format instances joining the sweeps), and its input errors, which exit 2 with one
line before Ray starts."""
import json

import pytest

from iclr_ray import cli



def _real_files(tmp_path):
    (tmp_path / "movies.csv").write_text("movieId,title,genres\n1,A,Comedy|Drama\n2,B,Drama\n3,C,Horror\n")
    (tmp_path / "ratings.csv").write_text("userId,movieId,rating,timestamp\n1,1,4.5,0\n2,2,3.0,0\n3,3,2.0,0\n")
    (tmp_path / "gr.csv").write_text("genre,rating\nfantasy,5\nfantasy,4\nhistory,2\nhistory,5\nromance,1\n")
    return [f"real.movielens_ratings={tmp_path / 'ratings.csv'}", f"real.movielens_movies={tmp_path / 'movies.csv'}",
            f"real.goodreads={tmp_path / 'gr.csv'}"]


@pytest.mark.slow
def test_smoke_study_runs_every_experiment_with_real_format_instances(ray_cluster, tmp_path):
    out = tmp_path / "run"
    sets = [x for s in _real_files(tmp_path) for x in ("--set", s)]
    assert cli.main(["run", "mab_cs", "--preset", "smoke", "--out", str(out), *sets]) == 0
    result = json.loads((out / "result.json").read_text())
    m = result["metrics"]
    assert {"movielens", "goodreads"} <= set(m["instances"])
    assert m["instances"]["movielens"]["labels"] and len(m["instances"]["goodreads"]["mu"]) == 3
    sweep_instances = {r["instance"] for r in m["alpha_sweep"]}
    assert {"synth10", "movielens", "goodreads"} <= sweep_instances
    assert {(r["instance"], r["ell"]) for r in m["ell_sweep"]} == {("synth10", 1), ("synth10", 7), ("movielens", 1),
                                                                  ("goodreads", 1)}  # 7 is no arm of the 3-genre files
    for r in m["alpha_sweep"]:
        assert r["runs"] == 5 and r["total"] >= 0 and sum(r["pulls"]) == pytest.approx(r["T"])
    assert {(f["policy"]) for f in m["horizon_fits"]} == {"pe", "pe_cs"}
    assert [r["T"] for r in m["horizons"] if r["policy"] == "pe"] == [300, 1000, 3000, 10000]
    ids = {c["id"] for c in result["claims"]}
    assert ids == {"pe_log_growth", "pe_cs_log_growth", "pe_cost_within_bound", "pe_quality_within_bound",
                   "baseline_linear_somewhere", "pe_cs_never_linear", "pe_pulls_scale_inverse_gap_squared",
                   "pe_cs_most_reliable_over_alpha", "pe_most_reliable_over_ell"}
    assert {c["id"] for c in result["checks"]} == {"pulls_sum_to_T", "pe_never_above_ell"}
    assert all(c["holds"] for c in result["checks"])
    assert all(c["ci"] is not None and c["n"] >= 5 for c in result["claims"])  # intervals over runs
    assert all(c["measured"] is not None or not c["holds"] for c in result["claims"])
    for r in m["alpha_sweep"]:  # per-run values, so the intervals recompute from result.json
        assert len(r["runs_cost"]) == len(r["runs_quality"]) == len(r["runs_pulls"]) == r["runs"]
    etc = next(r for r in m["curves"] if r["policy"] == "cs_etc")
    assert etc["window"]["t"][0] == etc["window"]["explore_end"] and etc["window"]["t"][0] in etc["times"]
    for name in ("regret_vs_t", "regret_vs_horizon", "pulls_vs_gap", "regret_vs_alpha", "regret_vs_ell"):
        assert (out / "plots" / f"{name}.png").stat().st_size > 10_000
    report = (out / "report.md").read_text()
    assert "### alpha_sweep" in report and "growth exponents" in report
    assert cli.main(["report", str(out)]) == 0  # claims re-rendered from result.json alone
    again = json.loads((out / "result.json").read_text())
    assert again["claims"] == result["claims"] and again["checks"] == result["checks"]


@pytest.mark.parametrize("sets, message", [
    (["curves.cases=[{instance: nowhere, alpha: 0.1}]"], "unknown instance nowhere"),
    (["ell_sweep.ells=[12]"], "ell_sweep.ells: 12 is not an arm of synth10"),
    (["alpha_sweep.policies=[pe_cs, magic]"], "'alpha_sweep.policies.1': Input should be"),
    (["instances=[{name: mine, mu: [0.5, 1.5], cost: [0.1, 0.2]}]"], "instances: instance mine: means must lie in [0, 1]"),
    (["real.goodreads=/nonexistent.csv"], "/nonexistent.csv: cannot read"),
    ([f"real.movielens_ratings={__file__}"], "give both movielens_ratings and movielens_movies"),
])
def test_input_errors_exit_2_before_ray(sets, message, input_error):
    assert message in input_error("mab_cs", sets)


def test_bad_ratings_file_names_its_line(tmp_path, input_error):
    sets = _real_files(tmp_path)
    (tmp_path / "ratings.csv").write_text("userId,movieId,rating,timestamp\n1,1,4.5,0\n2,2,lots,0\n")
    assert f"{tmp_path / 'ratings.csv'}:3: rating 'lots' is not a number" in input_error("mab_cs", sets)
