"""sphere_flow end to end: the smoke study on the session's Ray cluster (every experiment,
claims, plots, the report re-rendered from result.json), and its input errors, which exit 2
with one line before Ray starts."""
import json

import pytest

from iclr_ray import cli

CLAIMS = {"dominant_mode_circle", "dominant_mode_sphere", "growth_rate_particles", "growth_rate_pde",
          "metastable_plateau", "plateau_grows_with_beta", "metastable_grows_with_n", "fig4_periodic"}
CHECKS = {"energy_nondecreasing", "pde_mass_conserved", "pde_courant"}
PLOTS = ("k_star_vs_beta", "mode_amplitudes", "snapshots_circle", "cluster_counts", "snapshots_sphere", "pde_density",
         "metastable_vs_n")


@pytest.mark.slow
def test_smoke_study_runs_every_experiment(ray_cluster, tmp_path):
    out = tmp_path / "run"
    # three metastable β so that the trend claim has a value to compare
    assert cli.main(["run", "sphere_flow", "--preset", "smoke", "--out", str(out),
                     "--set", "metastable.betas=[2, 3, 4]"]) == 0
    result = json.loads((out / "result.json").read_text())
    m = result["metrics"]
    assert {c["id"] for c in result["claims"]} == CLAIMS and {c["id"] for c in result["checks"]} == CHECKS
    assert all(c["holds"] for c in result["checks"])
    by_id = {c["id"]: c for c in result["claims"]}
    for c in result["claims"]:  # every claim measured, with its interval over independent units
        assert c["measured"] is not None and c["ci"] is not None and c["n"] >= 1, c["id"]
    assert by_id["growth_rate_pde"]["holds"] and by_id["growth_rate_pde"]["n"] == 2
    assert by_id["metastable_grows_with_n"]["n"] == 3 * 3 and by_id["plateau_grows_with_beta"]["n"] == 1
    assert len(m["circle"]) == 2 * 2 and len(m["metastable"]) == 3 and len(m["sphere"]) == 1 and len(m["pde"]) == 2
    assert len(m["metastable_n"]) == 9 and [t["n"] for t in m["metastable_n_table"]] == [100, 400, 1600]
    assert all(r["reached"] and r["dominant"] is not None for r in m["circle"] + m["sphere"])
    assert [t["beta"] for t in m["metastable_table"]] == [2.0, 3.0, 4.0]
    assert all(p["mass_drift"] < 1e-12 and p["courant_max"] < 1 and p["grid"] == 999 for p in m["pde"])
    assert m["numerics"]["max_defect"] < 1e-3
    assert len(m["figures"]["pde_density"]["densities"][0]["rho"]) == 720  # compact: arcs, not the grid
    for name in PLOTS:
        assert (out / "plots" / f"{name}.png").stat().st_size > 10_000
    report = (out / "report.md").read_text()
    assert "Meta-stability on the circle" in report and "number of tokens" in report and "Time unit" in report
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 * 2 + 3 + 1 + 2 + 9
    before = {c["id"]: (c["measured"], c["ci"], c["holds"]) for c in result["claims"]}
    assert cli.main(["report", str(out)]) == 0  # claims re-rendered from result.json alone: the same intervals
    again = json.loads((out / "result.json").read_text())
    assert {c["id"]: (c["measured"], c["ci"], c["holds"]) for c in again["claims"]} == before


@pytest.mark.parametrize("sets, message", [
    (["circle.temperature=3"], "unknown key 'circle.temperature'"),
    (["circle.betas=[2, 0]"], "'circle.betas.1': Input should be greater than 0"),
    (["pde.beta=-1"], "'pde.beta': Input should be greater than 0"),
    (["sphere.d=1"], "'sphere.d': Input should be greater than or equal to 2"),
    (["metastable.forms=[softmax]"], "'metastable.forms.0': Input should be 'usa' or 'sa'"),
    (["pde.grid=256"], "pde.grid: on 256 cells the Lax-Friedrichs diffusion slows mode k* = 3 of beta = 5 by 30%"),
    (["pde.sigma=0.05"], "'pde.sigma': Input should be less than or equal to 0.025"),
    (["metastable_n.ns=[1000]"], "'metastable_n.ns': List should have at least 2 items"),
    (["sphere.d=4", "sphere.n=30000"], "sphere.n: 30000 tokens need 6.7 GiB per observation in d = 4"),
])
def test_input_errors_exit_2_before_ray(sets, message, input_error):
    assert message in input_error("sphere_flow", sets)
