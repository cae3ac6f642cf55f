"""tune_spaces/*.yaml -> Ray Tune domains, checked against a study config before Ray starts."""
from typing import Literal

import pytest
from pydantic import Field

from iclr_ray.config import ConfigError, Section, StudyConfig, resolve
from iclr_ray.sweep.spaces import load_space


class Train(Section):
    lr: float = Field(1e-3, gt=0)
    micro_batch_size: int = Field(4, ge=1)
    schedule: Literal["constant", "cosine"] = "cosine"
    warmup_steps: int = Field(0, ge=0)


class Cfg(StudyConfig):
    train: Train = Train()


GOOD = """metric: eval_loss
mode: min
num_samples: 2
params:
  train.lr: {loguniform: [1.0e-4, 3.0e-3]}
  train.micro_batch_size: {grid: [2, 4, 8]}
  train.schedule: {choice: [constant, cosine]}
  train.warmup_steps: {randint: [0, 20]}
"""


def write(tmp_path, text):
    f = tmp_path / "space.yaml"
    f.write_text(text)
    return f


def test_space_becomes_tune_domains_and_trial_overrides(tmp_path):
    from ray import tune
    from ray.tune.search.sample import Categorical, Float, Integer

    space = load_space(write(tmp_path, GOOD), Cfg)
    assert (space.metric, space.mode, space.num_samples, space.max_concurrent_trials) == ("eval_loss", "min", 2, 2)
    ps = space.tune_param_space()
    assert ps["train.micro_batch_size"] == tune.grid_search([2, 4, 8])
    assert isinstance(ps["train.lr"], Float) and isinstance(ps["train.schedule"], Categorical)
    assert isinstance(ps["train.warmup_steps"], Integer)
    trial = {"train.lr": 2e-4, "train.micro_batch_size": 8, "train.schedule": "constant", "train.warmup_steps": 5}
    cfg = resolve(Cfg, {}, "small", sets=space.overrides(trial))
    assert (cfg.train.lr, cfg.train.micro_batch_size, cfg.train.schedule, cfg.train.warmup_steps) == \
        (2e-4, 8, "constant", 5)


@pytest.mark.parametrize("params, message", [
    ("  train.lrr: {grid: [1]}", "unknown key 'train.lrr'"),
    ("  train.schedule: {choice: [constant, linear]}", "train.schedule='linear'"),
    ("  train.micro_batch_size: {grid: [0, 2]}", "greater than or equal to 1"),
    ("  train.lr: {loguniform: [0, 1]}", "loguniform needs low > 0"),
    ("  train.lr: {uniform: [1, 0.5]}", "low < high"),
    ("  train.lr: {sample: [1, 2]}", "expected one of grid"),
    ("  train.lr: {grid: []}", "non-empty list"),
])
def test_bad_spaces_are_one_line_errors(tmp_path, params, message):
    with pytest.raises(ConfigError) as err:
        load_space(write(tmp_path, f"metric: m\nparams:\n{params}\n"), Cfg)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_file_shape(tmp_path):
    with pytest.raises(ConfigError, match="unknown key 'metrc'"):
        load_space(write(tmp_path, "metrc: m\nparams: {}\n"), Cfg)
    with pytest.raises(ConfigError, match="params is empty"):
        load_space(write(tmp_path, "metric: m\nparams: {}\n"), Cfg)
    with pytest.raises(ConfigError, match="'mode'"):
        load_space(write(tmp_path, "metric: m\nmode: best\nparams: {a: {grid: [1]}}\n"), Cfg)
