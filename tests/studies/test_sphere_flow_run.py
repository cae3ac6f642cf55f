"""sphere_flow end to end: the smoke study on the session's Ray cluster (every experiment,
claims, plots, the report re-rendered from result.json), and its input errors, which exit 2
with one line before Ray starts."""
import json

import pytest

from iclr_ray import cli

CLAIMS = {"dominant_mode_circle", "dominant_mode_sphere", "growth_rate_particles", "growth_rate_pde",
          "metastable_plateau", "plateau_grows_with_beta", "fig4_periodic", "energy_nondecreasing"}
PLOTS = ("k_star_vs_beta", "mode_amplitudes", "snapshots_circle", "cluster_counts", "snapshots_sphere", "pde_density")



@pytest.mark.slow
def test_smoke_study_runs_every_experiment(ray_cluster, tmp_path):
    out = tmp_path / "run"
    # three metastable β so that the trend claim has a value to compare
    assert cli.main(["run", "sphere_flow", "--preset", "smoke", "--out", str(out),
                     "--set", "metastable.betas=[2, 3, 4]"]) == 0
    result = json.loads((out / "result.json").read_text())
    m = result["metrics"]
    assert {c["id"] for c in result["claims"]} == CLAIMS
    for c in result["claims"]:
        assert c["measured"] is not None or not c["holds"]
    by_id = {c["id"]: c for c in result["claims"]}
    assert by_id["plateau_grows_with_beta"]["measured"] is not None
    assert by_id["energy_nondecreasing"]["holds"] and by_id["growth_rate_pde"]["holds"]
    assert len(m["circle"]) == 2 * 2 and len(m["metastable"]) == 3 and len(m["sphere"]) == 1 and len(m["pde"]) == 2
    assert all(r["reached"] and r["dominant"] is not None for r in m["circle"] + m["sphere"])
    assert [t["beta"] for t in m["metastable_table"]] == [2.0, 3.0, 4.0]
    assert all(p["mass_drift"] < 1e-12 and p["stop"] == "under-resolved" for p in m["pde"])
    assert m["numerics"]["max_defect"] < 1e-3
    for name in PLOTS:
        assert (out / "plots" / f"{name}.png").stat().st_size > 10_000
    report = (out / "report.md").read_text()
    assert "Meta-stability on the circle" in report and "Time unit" in report
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 2 + 3 + 1 + 2
    assert cli.main(["report", str(out)]) == 0  # claims re-rendered from result.json alone
    assert {c["id"] for c in json.loads((out / "result.json").read_text())["claims"]} == CLAIMS


@pytest.mark.parametrize("sets, message", [
    (["circle.temperature=3"], "unknown key 'circle.temperature'"),
    (["circle.betas=[2, 0]"], "'circle.betas.1': Input should be greater than 0"),
    (["pde.beta=-1"], "'pde.beta': Input should be greater than 0"),
    (["sphere.d=1"], "'sphere.d': Input should be greater than or equal to 2"),
    (["metastable.forms=[softmax]"], "'metastable.forms.0': Input should be 'usa' or 'sa'"),
    (["pde.grid=64"], "pde.grid: 64 points are too few for beta = 5"),
    (["sphere.d=4", "sphere.n=30000"], "sphere.n: 30000 tokens need 6.7 GiB per observation in d = 4"),
])
def test_input_errors_exit_2_before_ray(sets, message, input_error):
    assert message in input_error("sphere_flow", sets)
