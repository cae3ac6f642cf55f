"""Grids of resumable trials (iclr_ray.sweep.grid) on the session's Ray cluster: results come back
in spec order with what each trial body returned, a rerun into the same storage finishes from the
saved results instead of running the bodies again, and a failed trial names its spec."""
import json
from pathlib import Path

import pytest

from iclr_ray.sweep.grid import FINAL, resumable, run_grid

pytestmark = pytest.mark.slow


def body():
    """A trial body defined in a function, so that Ray pickles it by value (workers cannot import
    the test module)."""

    @resumable
    def square(config, trial_dir: Path, *, log: str):
        spec = config["spec"]
        with open(log, "a") as f:  # one line per body that ran
            f.write(spec["label"] + "\n")
        if spec["x"] < 0:
            raise ValueError(f"negative x {spec['x']}")
        return {"scores": {"y": spec["x"] ** 2}, "dir": str(trial_dir)}

    return square


def test_a_grid_returns_in_spec_order_and_a_rerun_reads_the_saved_results(ray_cluster, tmp_path):
    log = tmp_path / "ran.txt"
    specs = [{"label": f"x{x}", "x": x} for x in (3, 1, 2)]
    square = body()
    first = run_grid(square, specs, storage=tmp_path / "tune", name="g", max_concurrent_trials=2, log=str(log))
    assert [t.spec for t in first] == specs and [t.final["scores"]["y"] for t in first] == [9, 1, 4]
    assert all(t.metrics["y"] == t.final["scores"]["y"] and t.error is None for t in first)
    assert all(isinstance(t.path, str) and Path(t.final["dir"]) == Path(t.path) for t in first)
    assert all(json.loads((Path(t.path) / FINAL).read_text()) == t.final for t in first)
    assert sorted(log.read_text().split()) == ["x1", "x2", "x3"]
    again = run_grid(square, specs, storage=tmp_path / "tune", name="g", max_concurrent_trials=2, log=str(log))
    assert [t.final for t in again] == [t.final for t in first]
    assert sorted(log.read_text().split()) == ["x1", "x2", "x3"]  # no body ran twice


def test_a_failed_trial_names_its_spec_unless_unfinished_trials_are_allowed(ray_cluster, tmp_path):
    specs = [{"label": "fine", "x": 2}, {"label": "broken", "x": -1}]
    square = body()
    with pytest.raises(RuntimeError, match="trial broken failed: .*negative x -1"):
        run_grid(square, specs, storage=tmp_path / "a", name="g", max_concurrent_trials=2, log=str(tmp_path / "l"))
    got = run_grid(square, specs, storage=tmp_path / "b", name="g", max_concurrent_trials=2, log=str(tmp_path / "l"),
                   allow_unfinished=True)
    assert got[0].final["scores"] == {"y": 4} and got[1].final is None and "negative x -1" in got[1].error
