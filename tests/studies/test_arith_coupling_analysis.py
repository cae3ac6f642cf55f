"""arith_coupling's analysis on hand-made grids: extrapolation factors, each method judged at its best
sweep variant, the claims over training seeds with their negative controls, and the Tune grid a
sweep config expands to."""
import json

import pytest
from pydantic import ValidationError

from iclr_ray.studies.arith_coupling.analysis import best_variants, claims, factor, report_md, summary
from iclr_ray.studies.arith_coupling.config import Config, variants
from iclr_ray.studies.arith_coupling.run import specs

TASK = {"name": "multi_addition", "train_digits": [1, 4], "train_count": [2, 4], "eval_digits": [1, 2, 4, 6, 8],
        "eval_count": [2, 4, 6, 8], "eval_samples": 10, "max_position": 40}


def grid(solved_digits: int, solved_count: int, inside: float = 1.0) -> dict[str, float]:
    """Accuracy 1 (or ``inside``) where digits <= solved_digits and count <= solved_count, else 0."""
    return {f"{d}x{c}": (inside if d <= solved_digits and c <= solved_count else 0.0)
            for d in TASK["eval_digits"] for c in TASK["eval_count"]}


def trial(method: str, g: dict[str, float], variant: str = "", seed: int = 0) -> dict:
    return {"task": "multi_addition", "method": method, "variant": variant, "seed": seed, "grid": g}


def keys(g):
    return {tuple(int(x) for x in k.split("x")): v for k, v in g.items()}


def test_factor_counts_the_solved_prefix_along_each_axis():
    assert factor(keys(grid(8, 6)), TASK, "digits", 0.9) == 2.0  # 8 digits solved at counts 2 and 4
    assert factor(keys(grid(8, 6)), TASK, "count", 0.9) == 1.5
    assert factor(keys(grid(4, 4)), TASK, "digits", 0.9) == 1.0
    assert factor(keys(grid(8, 8, inside=0.85)), TASK, "digits", 0.9) == 0.0  # below threshold everywhere
    holes = keys(grid(8, 8))
    holes[(6, 2)] = 0.5  # a gap stops the prefix even though 8 digits is solved
    assert factor(holes, TASK, "digits", 0.9) == 1.0


def test_each_method_is_judged_at_its_best_variant():
    trials = [trial("coupled", grid(8, 8), "lr0.001"), trial("coupled", grid(4, 4), "lr0.003"),
              trial("nope", grid(2, 2), "lr0.001"), trial("nope", grid(4, 6), "lr0.003"),
              trial("absolute", grid(6, 4), "lr0.001"), trial("absolute", grid(6, 4), "lr0.003", seed=1)]
    metrics = {"trials": trials, "tasks": [TASK], "threshold": 0.9}
    rows = summary(metrics)
    assert len(rows) == 6 and {r["seeds"] for r in rows} == {1}  # absolute's two variants stay separate
    best = best_variants(rows)
    assert best[("multi_addition", "coupled")]["variant"] == "lr0.001"
    assert best[("multi_addition", "nope")]["variant"] == "lr0.003"  # 1.0 / 1.5 beats 0.5 / 0.5
    by_id = {c.id: c for c in claims(metrics, None)}
    assert by_id["multi_addition_coupled_length"].measured == 2.0
    assert by_id["multi_addition_coupled_length"].holds is None  # one seed: an unbounded interval
    assert by_id["multi_addition_nope_collapses"].measured == 1.0
    md = report_md(metrics, Config())
    assert "lr0.001 (best)" in md and "coupled, its best sweep variant lr0.001" in md


def seeds(method: str, grids: list[dict[str, float]]) -> list[dict]:
    return [trial(method, g, seed=s) for s, g in enumerate(grids)]


def by_id(trials):
    return {c.id: c for c in claims({"trials": trials, "tasks": [TASK], "threshold": 0.9}, None)}


def test_coupled_claims_are_judged_over_seeds():
    c = by_id(seeds("coupled", [grid(8, 8)] * 3))
    assert c["multi_addition_coupled_length"].holds is True and c["multi_addition_coupled_length"].n == 3
    assert c["multi_addition_coupled_count"].holds is True
    # negative control: accuracy falls right after the training range in every seed
    c = by_id(seeds("coupled", [grid(4, 4)] * 3))
    assert c["multi_addition_coupled_length"].holds is False and c["multi_addition_coupled_length"].measured == 1.0
    assert c["multi_addition_coupled_count"].holds is False
    # seeds that disagree (2x, 2x, 1x): a wide interval, an honest inconclusive
    c = by_id(seeds("coupled", [grid(8, 8), grid(8, 8), grid(4, 4)]))["multi_addition_coupled_length"]
    assert c.holds is None and c.ci[0] < 2 < c.ci[1]


def test_a_baseline_collapses_only_if_it_fits_its_training_range_first():
    # fits the range (4 x 4) in every seed and fails right after it: the paper's collapse
    c = by_id(seeds("nope", [grid(4, 4)] * 3))["multi_addition_nope_collapses"]
    assert c.holds is True and c.measured == 1.0 and c.n == 3
    # negative control: a baseline that never learns (what held the old claim at small)
    c = by_id(seeds("nope", [grid(8, 8, inside=0.3)] * 3))["multi_addition_nope_collapses"]
    assert c.holds is False and c.measured == 0.0
    # ... nor one that fits only part of its range
    assert by_id(seeds("nope", [grid(2, 4)] * 3))["multi_addition_nope_collapses"].holds is False
    # negative control: a baseline that generalises like the method
    c = by_id(seeds("absolute", [grid(8, 8)] * 3))["multi_addition_absolute_collapses"]
    assert c.holds is False and c.measured == 2.0
    # one seed: no interval, no verdict
    assert by_id(seeds("nope", [grid(4, 4)]))["multi_addition_nope_collapses"].holds is None


def test_claims_are_recomputed_from_result_json_alone():
    trials = seeds("coupled", [grid(8, 6), grid(6, 8)]) + seeds("single", [grid(4, 4), grid(4, 6)])
    metrics = {"trials": trials, "tasks": [TASK], "threshold": 0.9}
    again = json.loads(json.dumps(metrics))
    assert [c.to_dict() for c in claims(metrics, None)] == [c.to_dict() for c in claims(again, None)]
    assert [c.n for c in claims(metrics, None)] == [2, 2, 2, 2]


def test_a_sweep_expands_the_tune_grid():
    cfg = Config.model_validate({"tasks": [TASK], "methods": ["coupled", "nope"], "seeds": 2,
                                 "model": {"d_model": 64, "d_ff": 256, "heads": 4},
                                 "sweep": {"layers": [1, 2], "lr": [1e-3, 3e-3]}})
    vs = variants(cfg)
    assert [v["name"] for v in vs] == ["L1 lr0.001", "L1 lr0.003", "L2 lr0.001", "L2 lr0.003"]
    assert all(v["model"]["d_ff"] == 256 and v["model"]["d_model"] == 64 for v in vs)
    grid_ = specs(cfg)
    assert len(grid_) == 2 * 4 * 2 and len({s["label"] for s in grid_}) == 16
    assert {s["lr"] for s in grid_} == {1e-3, 3e-3}
    wide = variants(Config.model_validate({"model": {"d_model": 64, "d_ff": 256}, "sweep": {"d_model": [32, 128]}}))
    assert [(v["name"], v["model"]["d_ff"]) for v in wide] == [("d32", 128), ("d128", 512)]  # d_ff keeps its ratio
    plain = variants(Config())
    assert len(plain) == 1 and plain[0]["name"] == "" and plain[0]["lr"] is None
    with pytest.raises(ValidationError, match="not a multiple of heads"):
        Config.model_validate({"model": {"heads": 4}, "sweep": {"d_model": [30]}})
    with pytest.raises(ValidationError, match="must be positive"):
        Config.model_validate({"sweep": {"lr": [0.0]}})


def test_claims_cover_every_task():
    mult = {**TASK, "name": "multiplication", "train_count": [1, 2], "eval_count": [1, 2, 4]}
    trials = [trial("coupled", grid(8, 8)), trial("nope", grid(2, 2))]
    trials += [{**t, "task": "multiplication", "grid": {k: v for k, v in t["grid"].items() if int(k.split("x")[1]) in (2, 4)}
                | {f"{d}x1": 1.0 for d in TASK["eval_digits"]}} for t in trials]
    ids = [c.id for c in claims({"trials": trials, "tasks": [TASK, mult], "threshold": 0.9}, None)]
    assert ids == ["multi_addition_coupled_fits_range", "multi_addition_coupled_length", "multi_addition_coupled_count",
                   "multi_addition_nope_collapses", "multiplication_coupled_fits_range", "multiplication_coupled_a",
                   "multiplication_coupled_b", "multiplication_nope_collapses"]


def test_the_coupled_model_must_fit_its_training_corner():
    c = by_id(seeds("coupled", [grid(8, 8)] * 3))["multi_addition_coupled_fits_range"]
    assert c.holds is True and c.measured == 1.0
    # negative control: the 4 x 4 corner at 0.9 in every seed (enough for the 0.9 factors, not a fit)
    almost = [{**grid(8, 8), "4x4": 0.9}] * 3
    c = by_id(seeds("coupled", almost))["multi_addition_coupled_fits_range"]
    assert c.holds is False and c.measured == pytest.approx(0.9)


ADD = {"name": "addition", "train_digits": [1, 10], "train_count": [2, 2], "eval_digits": [1, 5, 10, 15, 20, 25, 30],
       "eval_count": [2], "eval_samples": 10, "max_position": 35}


def add_grid(accs: list[float]) -> dict[str, float]:
    return {f"{d}x2": a for d, a in zip(ADD["eval_digits"], accs)}


def add_claims(method_grids: dict[str, list[list[float]]]):
    trials = [{"task": "addition", "method": m, "variant": "", "seed": s, "grid": add_grid(g)}
              for m, gs in method_grids.items() for s, g in enumerate(gs)]
    return {c.id: c for c in claims({"trials": trials, "tasks": [ADD], "threshold": 0.9}, None)}


def test_two_operand_addition_claims_have_one_axis():
    good = [1, 1, 1, 0.99, 0.97, 0.9, 0.5]
    fits_only = [1, 1, 0.95, 0.2, 0, 0, 0]
    c = add_claims({"coupled": [good, good, [1, 1, 1, 0.98, 0.95, 0.6, 0.2]], "absolute": [fits_only] * 3,
                    "nope": [[1, 1, 0.95, 0.9, 0.92, 0.3, 0]] * 3})
    assert set(c) == {"addition_coupled_fits_range", "addition_coupled_length", "addition_coupled_at_2x",
                      "addition_absolute_collapses", "addition_nope_collapses"}
    assert c["addition_coupled_at_2x"].holds is True and c["addition_coupled_at_2x"].measured == pytest.approx(0.963, abs=1e-3)
    assert c["addition_coupled_length"].measured == pytest.approx((2.5 + 2.5 + 2.0) / 3)
    assert c["addition_absolute_collapses"].holds is True and c["addition_absolute_collapses"].measured == 1.0
    # negative control: a baseline that generalises to 2x must not "collapse" (count is fixed at 2,
    # so its count factor, 1, must not stand in for the smaller factor)
    assert c["addition_nope_collapses"].holds is False and c["addition_nope_collapses"].measured == 2.0
    # negative control: the coupled model falls right after its range in every seed
    c = add_claims({"coupled": [fits_only] * 3})
    assert c["addition_coupled_at_2x"].holds is False and c["addition_coupled_length"].holds is False
    assert c["addition_coupled_fits_range"].holds is True
    md = report_md({"trials": [{"task": "addition", "method": "coupled", "variant": "", "seed": 0,
                                "grid": add_grid(good)}], "tasks": [ADD], "threshold": 0.9}, Config())
    assert "at 2x the length" in md and "operand count" not in md


def test_methods_that_coincide_on_addition_are_not_trained_twice():
    cfg = Config.model_validate({"tasks": [ADD, TASK], "seeds": 2})
    grid_ = specs(cfg)
    assert sorted({s["method"] for s in grid_ if s["task"]["name"] == "addition"}) == ["absolute", "coupled", "nope"]
    assert len([s for s in grid_ if s["task"]["name"] == "multi_addition"]) == 5 * 2
