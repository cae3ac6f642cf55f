"""arith_coupling end to end: the smoke grid trained through Tune + Ray Train + DeepSpeed, its
heat maps and claims, re-evaluation of the saved models on a larger grid (eval_only), the training
recipe's determinism, and input errors (exit 2, one line, before Ray starts)."""
import json

import numpy as np
import pytest
import torch

from iclr_ray import cli
from iclr_ray.llm.data import IGNORE
from iclr_ray.llm.train import TrainConfig
from iclr_ray.studies.arith_coupling.run import CouplingRecipe, model_config, needed_rows, table_sizes
from iclr_ray.studies.arith_coupling.config import PRESETS, Config


def test_recipe_batches_are_a_function_of_the_step():
    cfg = Config.model_validate(PRESETS["smoke"])
    task = cfg.tasks[0].model_dump(mode="json")
    recipe = CouplingRecipe(task, "coupled", model_config(cfg.model.model_dump(), task, "coupled"), 0)
    tcfg = TrainConfig(micro_batch_size=8, grad_accum=2, num_workers=2, max_steps=10)
    a, b, c = recipe.step_batches(3, tcfg), recipe.step_batches(3, tcfg), recipe.step_batches(4, tcfg)
    assert len(a) == 4 and all(x[0]["tokens"].shape[0] == 8 for x in a)  # grad_accum x workers micro-batches
    assert all(np.array_equal(x[0]["tokens"], y[0]["tokens"]) and np.array_equal(x[0]["positions"], y[0]["positions"])
               for x, y in zip(a, b))  # a resumed run sees the same step
    assert not np.array_equal(a[0][0]["positions"], c[0][0]["positions"])
    batch = a[0][0]
    assert ((batch["labels"] == IGNORE) | (batch["labels"] == batch["tokens"])).all()
    assert (batch["labels"][batch["pad"]] == IGNORE).all() and (batch["labels"] != IGNORE).any()
    model = recipe.build_model(tcfg)
    loss = recipe.loss(model, batch)  # summed over the batch's label tokens
    assert loss.ndim == 0 and torch.isfinite(loss) and loss.item() > 0 and recipe.units(batch) == int(
        (batch["labels"][:, 1:] != IGNORE).sum())


def test_absolute_tables_cover_the_longest_evaluated_sequence_and_training_reaches_them():
    cfg = Config()
    task = next(t for t in cfg.tasks if t.name == "multi_addition").model_dump(mode="json")
    assert table_sizes(task, "coupled") == task["max_position"] + 1
    longest = needed_rows(task, "absolute")
    assert table_sizes(task, "absolute") == longest > 300  # 12 operands of 12 digits with their sums
    recipe = CouplingRecipe(task, "absolute", model_config(cfg.model.model_dump(), task, "absolute"), 0)
    tcfg = TrainConfig(micro_batch_size=64, max_steps=10)
    ids = np.concatenate([b["positions"][~b["pad"]].numpy().ravel() for s in range(5)
                          for b, _ in recipe.step_batches(s, tcfg)])
    # random starts: training ids cover the table, far past the ~40 tokens of a 4 x 4 training sum
    assert longest - 40 < ids.max() < longest and np.percentile(ids, 75) > 150


@pytest.mark.slow
def test_smoke_trains_every_method_and_eval_only_rescores_the_saved_models(ray_cluster, tmp_path):
    out = tmp_path / "run"
    assert cli.main(["run", "arith_coupling", "--preset", "smoke", "--out", str(out)]) == 0
    result = json.loads((out / "result.json").read_text())
    trials = result["metrics"]["trials"]
    assert [(t["task"], t["method"]) for t in trials] == [("multi_addition", "coupled"), ("multi_addition", "nope")]
    for t in trials:
        assert set(t["grid"]) == {f"{d}x{c}" for d in (1, 2, 4) for c in (2, 3, 6)}
        assert all(0.0 <= v <= 1.0 for v in t["grid"].values())
        assert len(t["curve"]) > 10 and t["curve"][-1][1] < t["curve"][0][1]  # it learned something
        # ZeRO stage 0 (DeepSpeed keeps no grad norm there): every logged norm must still be a real one
        assert all(g > 0 for _, _, g in t["curve"])
    assert {c["id"] for c in result["claims"]} == {"multi_addition_coupled_fits_range", "multi_addition_coupled_length",
                                                   "multi_addition_coupled_count", "multi_addition_nope_collapses"}
    assert all(c["n"] == 1 and c["ci"] == [None, None] and c["holds"] is None for c in result["claims"])  # one seed
    assert (out / "plots" / "heatmap_multi_addition.png").stat().st_size > 10_000
    assert cli.main(["report", str(out)]) == 0

    again = tmp_path / "again"
    assert cli.main(["run", "arith_coupling", "--preset", "smoke", "--out", str(again), "--set", f"eval_only={out}",
                     "--set", "tasks=[{name: multi_addition, train_digits: [1, 2], train_count: [2, 3], "
                              "eval_digits: [1, 2, 3, 5], eval_count: [2, 4], max_position: 12, eval_samples: 10}]"]) == 0
    re = json.loads((again / "result.json").read_text())["metrics"]
    assert re["eval_only"] == str(out) and all(t["eval_only"] for t in re["trials"])
    assert set(re["trials"][0]["grid"]) == {f"{d}x{c}" for d in (1, 2, 3, 5) for c in (2, 4)}
    assert re["trials"][0]["grid"]["1x2"] == trials[0]["grid"]["1x2"]  # the same model and numbers score the same
    assert not (again / "tune").exists()  # nothing trained


def test_input_errors_exit_2_before_ray(tmp_path, input_error):
    assert "above max_position = 12" in input_error("arith_coupling", [
        "tasks=[{name: multi_addition, eval_digits: [20], eval_count: [2], max_position: 12}]"])
    assert "needs at least 2 operands" in input_error("arith_coupling", ["tasks=[{name: multi_addition, train_count: [1, 3]}]"])
    assert "'methods.0': Input should be" in input_error("arith_coupling", ["methods=[rope]"])
    assert "not a multiple of heads" in input_error("arith_coupling", ["model.d_model=33"])
    (tmp_path / "notarun").mkdir()
    assert "cannot be read as a finished run" in input_error("arith_coupling", [f"eval_only={tmp_path / 'notarun'}"])


def test_an_unfinished_run_of_another_config_is_not_resumed(tmp_path, capsys):
    out = tmp_path / "unfinished"
    out.mkdir()
    (out / "config.yaml").write_text("seed: 5\n")  # what an interrupted run of another config leaves
    assert cli.main(["run", "arith_coupling", "--preset", "smoke", "--out", str(out)]) == 2
    assert "holds an unfinished run of another config" in capsys.readouterr().err
    assert (out / "config.yaml").read_text() == "seed: 5\n"  # left as it was
