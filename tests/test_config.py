from typing import Optional

import pytest
from pydantic import Field

from iclr_ray.config import ConfigError, Section, StudyConfig, parse_set, resolve, to_yaml


class Inner(Section):
    rate: float = 0.1
    names: list[str] = ["a"]


class Cfg(StudyConfig):
    steps: int = Field(10, ge=1)
    path: Optional[str] = None
    inner: Inner = Inner()


PRESETS = {"smoke": {"steps": 2}, "small": {}, "paper": {"steps": 1000, "inner": {"rate": 0.5}}}


def test_presets_apply_over_defaults():
    assert resolve(Cfg, PRESETS, "smoke").steps == 2
    assert resolve(Cfg, PRESETS, "small").steps == 10
    paper = resolve(Cfg, PRESETS, "paper")
    assert (paper.steps, paper.inner.rate, paper.inner.names) == (1000, 0.5, ["a"])


def test_set_overrides_are_typed_and_nested():
    cfg = resolve(Cfg, PRESETS, "paper", sets=["inner.rate=3e-4", "inner.names=[x, y]", "seed=7"])
    assert cfg.inner.rate == pytest.approx(3e-4) and cfg.inner.names == ["x", "y"] and cfg.seed == 7
    assert cfg.steps == 1000  # untouched preset value survives a nested override
    assert parse_set("a.b.c=true") == {"a": {"b": {"c": True}}}


def test_file_then_set_precedence(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("steps: 5\ninner:\n  rate: 0.2\n")
    cfg = resolve(Cfg, PRESETS, "smoke", file=f, sets=["steps=6"])
    assert (cfg.steps, cfg.inner.rate) == (6, 0.2)


def test_resolved_yaml_round_trips(tmp_path):
    cfg = resolve(Cfg, PRESETS, "paper", sets=["path=/x"])
    f = tmp_path / "config.yaml"
    f.write_text(to_yaml(cfg))
    assert resolve(Cfg, {}, "small", file=f) == cfg


@pytest.mark.parametrize("sets, message", [
    (["stepz=3"], "unknown key 'stepz'"),
    (["inner.ratee=1"], "unknown key 'inner.ratee'"),
    (["steps=abc"], "'steps': Input should be a valid integer"),
    (["steps=0"], "'steps': Input should be greater than or equal to 1"),
    (["steps"], "--set expects key=value"),
    (["a..b=1"], "--set expects key=value"),
])
def test_bad_values_give_one_line(sets, message):
    with pytest.raises(ConfigError) as err:
        resolve(Cfg, PRESETS, "small", sets=sets)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        resolve(Cfg, PRESETS, "small", file=tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        resolve(Cfg, PRESETS, "small", file=bad)
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        resolve(Cfg, PRESETS, "small", file=lst)
    with pytest.raises(ConfigError, match="unknown preset"):
        resolve(Cfg, PRESETS, "huge")
