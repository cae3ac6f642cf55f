"""Search spaces for ``iclr-ray sweep``, read from ``tune_spaces/*.yaml`` into Ray Tune domains.

    metric: eval_loss            # what the trials report and the sweep ranks by
    mode: min                    # min | max
    num_samples: 1               # repeats of the grid (random domains draw anew each time)
    max_concurrent_trials: 2
    params:                      # dotted keys of the study's config
      train.lr: {loguniform: [1.0e-4, 3.0e-3]}
      train.micro_batch_size: {grid: [2, 4, 8]}
      train.schedule: {choice: [constant, cosine]}
      train.warmup_steps: {randint: [0, 20]}   # low inclusive, high exclusive, as in Tune

Every key and value is checked against the study's config class before Ray starts: an unknown
key, a value of the wrong type or a malformed domain is a one-line ConfigError.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..config import ConfigError, deep_merge, format_validation_error, load_yaml_file, parse_set

KINDS = ("grid", "choice", "uniform", "loguniform", "randint", "quniform")


class _SpaceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: str
    mode: Literal["min", "max"] = "min"
    num_samples: int = Field(1, ge=1)
    max_concurrent_trials: int = Field(2, ge=1)
    params: dict[str, dict[str, Any]]


@dataclass
class SweepSpace:
    metric: str
    mode: str
    num_samples: int
    max_concurrent_trials: int
    params: dict[str, tuple[str, list]] = field(default_factory=dict)
    """dotted key -> (kind, arguments)"""

    def tune_param_space(self) -> dict[str, Any]:
        """The flat ``{dotted key: tune domain}`` mapping for ``Tuner(param_space=...)``."""
        from ray import tune

        make = {"grid": tune.grid_search, "choice": tune.choice, "uniform": lambda a: tune.uniform(*a),
                "loguniform": lambda a: tune.loguniform(*a), "randint": lambda a: tune.randint(*a),
                "quniform": lambda a: tune.quniform(*a)}
        return {key: make[kind](args) for key, (kind, args) in self.params.items()}

    def overrides(self, trial_config: Mapping[str, Any]) -> list[str]:
        """A trial's sampled values as ``--set`` items, for config.resolve."""
        return [f"{k}={_yaml_scalar(trial_config[k])}" for k in self.params]


def _yaml_scalar(v: Any) -> str:
    import yaml

    return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()


def _parse_domain(key: str, spec: Mapping[str, Any]) -> tuple[str, list]:
    if len(spec) != 1 or next(iter(spec)) not in KINDS:
        raise ConfigError(f"space {key!r}: expected one of {', '.join(KINDS)} as the only key, got {dict(spec)}")
    kind, args = next(iter(spec.items()))
    if not isinstance(args, list) or not args:
        raise ConfigError(f"space {key!r}: {kind} takes a non-empty list")
    if kind in ("uniform", "loguniform", "randint"):
        if len(args) != 2 or not all(isinstance(a, (int, float)) for a in args) or not args[0] < args[1]:
            raise ConfigError(f"space {key!r}: {kind} takes [low, high] numbers with low < high, got {args}")
        if kind == "loguniform" and args[0] <= 0:
            raise ConfigError(f"space {key!r}: loguniform needs low > 0, got {args[0]}")
    if kind == "quniform" and (len(args) != 3 or not args[0] < args[1] or args[2] <= 0):
        raise ConfigError(f"space {key!r}: quniform takes [low, high, q] with low < high, q > 0, got {args}")
    return kind, list(args)


def _probe_values(kind: str, args: list) -> list:
    """Values that stand for the domain when checking it against the config."""
    return args if kind in ("grid", "choice") else args[:2] if kind != "randint" else [args[0], args[1] - 1]


def load_space(path: str | Path, config_cls: type[BaseModel], base: Mapping[str, Any] | None = None) -> SweepSpace:
    """Read a space file and check every key and representative value against ``config_cls``."""
    raw = load_yaml_file(path)
    try:
        spec = _SpaceFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path}: {format_validation_error(exc)}") from None
    if not spec.params:
        raise ConfigError(f"{path}: params is empty, nothing to sweep")
    space = SweepSpace(spec.metric, spec.mode, spec.num_samples, spec.max_concurrent_trials)
    for key, domain in spec.params.items():
        kind, args = _parse_domain(key, domain)
        for value in _probe_values(kind, args):
            trial = deep_merge(dict(base or {}), parse_set(f"{key}={_yaml_scalar(value)}"))
            try:
                config_cls.model_validate(trial)
            except ValidationError as exc:
                raise ConfigError(f"{path}: {key}={value!r}: {format_validation_error(exc)}") from None
        space.params[key] = (kind, args)
    return space
