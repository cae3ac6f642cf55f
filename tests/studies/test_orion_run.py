"""orion end to end: the smoke preset (a random tiny model) through the CLI on the session's Ray
cluster, and the input errors, which exit 2 with one line before Ray starts."""
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from iclr_ray import cli  # noqa: E402


@pytest.mark.parametrize("sets, message", [
    (["models=['./no/such/checkpoint']"], "not a model checkpoint"),
    (["oversight.layer=9"], "oversight.layer 9: tiny-random has 4 layers"),
    (["tasks=['nanoqa', 'nanoqa']"], "tasks lists a value twice"),
    (["tasks=['arithmetic']"], "tasks"),
])
def test_bad_input_exits_2_with_one_line(input_error, sets, message):
    assert message in input_error("orion", sets)


@pytest.mark.slow
def test_smoke_runs_every_layer_band_and_draws_the_figures(ray_cluster, tmp_path):
    out = tmp_path / "run"
    assert cli.main(["run", "orion", "--preset", "smoke", "--out", str(out), "--set", "layer_bands=3"]) == 0
    result = json.loads((out / "result.json").read_text())
    m = result["metrics"]
    assert len(m["cells"]) == 6 and {c["task"] for c in m["cells"]} == {"nanoqa", "induction", "typehint", "factual",
                                                                        "translation", "quantity"}
    for cell in m["cells"]:
        pl = cell["per_layer"]
        assert pl["layers"] == [0, 1, 2, 3]  # three bands merged back in order
        assert all(len(row) == len(cell["pairs"]) == 8 for row in pl["r1c2"])
        assert 0 <= cell["selected_layer"] < 4
    over = m["oversight"]["tiny-random"]
    assert len(over["plain"]) == len(over["patched"]) == 6 and len(over["by_layer"]) == 4
    assert over["by_layer"][over["layer"]] == over["patched"]  # L*'s curve point is the claim's data
    checks = {c["id"]: c for c in result["checks"]}
    assert checks["tiny_random_last_layer_is_x1"]["holds"]  # the identity, through Ray and the bands
    assert {"tiny_random_unrelated_patch_gives_no_request", "tiny_random_noise_patch_gives_no_request"} <= set(checks)
    claims = {c["id"] for c in result["claims"]}
    assert {"tiny_random_same_request_keeps_answer", "tiny_random_nanoqa_request_above_chance"} <= claims
    assert all(len(row) == 8 for cell in m["cells"] for row in cell["per_layer"]["same_r2c2"])
    assert sorted(p.name for p in (out / "plots").iterdir()) == ["layers_tiny_random.png", "oversight.png"]
    assert "randomly initialised tiny model" in (out / "report.md").read_text()
