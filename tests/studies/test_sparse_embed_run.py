"""sparse_embed end to end: the smoke study on the session's Ray cluster, on generated data and on
a docword file, and its input errors, which exit 2 with one line before Ray starts."""
import json

import pytest
import scipy.sparse as sp

from iclr_ray import cli
from iclr_ray.studies.sparse_embed import data

CLAIMS = {"lp_within_eps", "linf_exact", "linf_log_tight", "linear_not_exact", "signed_fails", "cs_beats_s_squared",
          "diameter_lp"}
CHECKS = {"one_sided", "lp_dims_law", "birthday_curve", "birthday_s_squared", "diameter_exact_linf", "k_center_linf_same"}



@pytest.mark.slow
def test_smoke_study_runs_every_experiment(ray_cluster, tmp_path):
    out = tmp_path / "run"
    assert cli.main(["run", "sparse_embed", "--preset", "smoke", "--out", str(out)]) == 0
    result = json.loads((out / "result.json").read_text())
    m = result["metrics"]
    assert m["data"]["source"] == "reviews (bag of words)" and m["data"]["n"] == 60 and m["data"]["d"] > 10_000
    rows = m["lp"]["rows"]
    assert {(r["method"], r["eps"], r["seed"], r["p"]) for r in rows} == {
        (meth, eps, seed, p) for meth in ("maxpool", "linear") for eps in (0.4, 0.2) for seed in (0, 1)
        for p in ("1", "2", "3", "8", "16", "inf")}
    maxpool = [r for r in rows if r["method"] == "maxpool"]
    assert all(r["max_ratio"] <= 1 + 1e-9 for r in maxpool)  # one-sided, whatever the claims say
    assert all(r["exact_fraction"] == 1.0 for r in maxpool if r["p"] == "inf")
    assert {r["seed"] for r in m["lp"]["signed"]["rows"]} == {0, 1} and len(m["lp"]["downstream"]["diameter"]) == 2 * (24 + 1)
    assert {r["size"] for r in m["linf"]} == {16, 64} and len(m["linf"]) == 6
    assert all(len(r["exact_by_t"]) == r["t_pred"] + 4 for r in m["linf"])
    assert {r["s"] for r in m["birthday"]} == {4, 8} and {r["s"] for r in m["cs"]} == {4, 8}
    assert all(len(r["ok"]) == 20 for r in m["cs"])  # per-vector outcomes: the unit of the cs interval
    assert {c["id"] for c in result["claims"]} == CLAIMS and {c["id"] for c in result["checks"]} == CHECKS
    assert all(c["ci"] is not None and c["n"] >= 2 for c in result["claims"])
    for name in ("distortion_vs_dims", "linf_exact_vs_reps", "average_case"):
        assert (out / "plots" / f"{name}.png").stat().st_size > 10_000
    report = (out / "report.md").read_text()
    assert "### Exact ℓ_∞" in report and "### Downstream" in report and "## Checks" in report
    assert cli.main(["report", str(out)]) == 0  # claims re-rendered from result.json alone
    again = json.loads((out / "result.json").read_text())
    assert again["claims"] == result["claims"] and again["checks"] == result["checks"]


@pytest.mark.slow
def test_docword_file_replaces_the_generated_vectors(ray_cluster, tmp_path):
    X = data.random_sparse(24, 3000, 6, seed=3)
    X.data = (X.data * 3).round() + 1  # word counts
    lines = [f"{r + 1} {c + 1} {int(v)}" for r in range(24) for c, v in zip(X[r].indices, X[r].data)]
    f = tmp_path / "docword.synthetic.txt"
    f.write_text(f"24\n3000\n{len(lines)}\n" + "\n".join(lines) + "\n")
    out = tmp_path / "run"
    assert cli.main(["run", "sparse_embed", "--preset", "smoke", "--out", str(out), "--set", f"vectors.docword={f}",
                     "--set", "vectors.n=20", "--set", "linf.sizes=[8,16]", "--set", "lp.linear_baseline=false",
                     "--set", "lp.ps=[1, 2]"]) == 0
    m = json.loads((out / "result.json").read_text())["metrics"]
    assert m["data"]["source"] == "docword docword.synthetic.txt" and m["data"]["n"] == 20 and m["data"]["d"] == 3000
    assert {r["method"] for r in m["lp"]["rows"]} == {"maxpool"}
    # repeated word counts make equal values, so bit-exact l_inf must still hold on real-style data
    assert all(r["exact_fraction"] == 1.0 for r in m["lp"]["rows"] if r["p"] == "inf")


@pytest.mark.parametrize("sets, message", [
    (["lp.eps=[0.5, 1.5]"], "eps values must lie in (0, 1)"),
    (["vectors.s=50", "vectors.d=10"], "s = 50 non-zeros do not fit in d = 10"),
    (["lp.ps=[0.5]"], "p must be >= 1"),
    (["linf.sizes=[1, 8]"], "sizes must be >= 2"),
    (["cs.m_min=64", "cs.m_max=32"], "cs.m_min = 64 exceeds cs.m_max = 32"),
    (["lp.colour=red"], "unknown key 'lp.colour'"),
])
def test_bad_config_exits_2_with_one_line(sets, message, input_error):
    assert message in input_error("sparse_embed", sets)


def test_bad_data_files_exit_2_with_one_line(tmp_path, input_error):
    bad = tmp_path / "docword.bad.txt"
    bad.write_text("3\n5\n2\n1 2 3\n2 x 1\n")
    assert f"{bad}:5: expected 'docID wordID count'" in input_error("sparse_embed", [f"vectors.docword={bad}"])
    sp.save_npz(tmp_path / "x.npz", data.random_sparse(5, 100, 3, seed=0))
    both = [f"vectors.docword={bad}", f"vectors.npz={tmp_path / 'x.npz'}"]
    assert "give at most one of docword and npz" in input_error("sparse_embed", both)
    assert "vectors.npz" in input_error("sparse_embed", [f"vectors.npz={tmp_path / 'none.npz'}"])
