"""Typed study configs: pydantic models, presets, YAML files and ``--set a.b=value`` overrides.

A study's config is a pydantic model whose defaults are the ``small`` preset; the other presets
are partial overrides. Resolution order: defaults -> preset -> YAML file -> ``--set`` overrides,
each merged key by key into the one before, then one validation. Unknown keys and wrong types
raise :class:`ConfigError` with one readable line.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, ClassVar, Mapping, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

PRESETS = ("smoke", "small", "paper")


class ConfigError(ValueError):
    """A config the user gave cannot be used. The message is one line meant for the user."""


class DataError(ConfigError):
    """An input file named by the config cannot be read or parsed (one line, with the place)."""


class StudyConfig(BaseModel):
    """Base for every study config: unknown keys are rejected, values are checked on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    seed: int = 0
    """Root seed: every random choice in a run derives from it."""


class Section(BaseModel):
    """A nested part of a study config; rejects unknown keys like the root.

    ``together`` names pairs of optional fields (two files of one data set, say) that are given
    both or neither."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    together: ClassVar[tuple[tuple[str, str], ...]] = ()

    @model_validator(mode="after")
    def _given_together(self):
        for a, b in self.together:
            if (getattr(self, a) is None) != (getattr(self, b) is None):
                raise ValueError(f"give both {a} and {b}, or neither")
        return self


def overrides_of(model: type[BaseModel], name: str | None = None) -> type[Section]:
    """A section with every field of ``model`` optional (None: not overridden), for values that
    override a shared section per item (a task's own SAC values over the study's). Field names,
    types and docs come from ``model``, so the two never drift apart; :func:`apply_overrides`
    merges and validates."""
    fields = {k: (Optional[Annotated[(f.annotation, *f.metadata)]] if f.metadata else Optional[f.annotation],
                  Field(None, description=f.description))
              for k, f in model.model_fields.items()}  # each value checked as the model checks it
    doc = f"Per-item overrides of {model.__name__} (None: the shared value)."
    return create_model(name or f"{model.__name__}Overrides", __base__=Section, __doc__=doc, **fields)


def apply_overrides(base: BaseModel, overrides: BaseModel | None) -> BaseModel:
    """``base`` with the fields ``overrides`` sets, validated as ``base``'s model."""
    given = overrides.model_dump(exclude_none=True) if overrides is not None else {}
    return type(base).model_validate(base.model_dump() | given)


def deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``base`` with ``update`` merged in; nested mappings merge, everything else replaces."""
    out = copy.deepcopy(dict(base))
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_set(item: str) -> dict[str, Any]:
    """``"a.b=3"`` -> ``{"a": {"b": 3}}``; the value is read as YAML (numbers, lists, booleans)."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set expects key=value (dots for nesting), got {item!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    for part in reversed(key.split(".")):
        value = {part: value}
    return value


def load_yaml_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping from ``path``; any problem becomes a one-line :class:`ConfigError`."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"config file {path} is not valid YAML{where}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of keys, got {type(data).__name__}")
    return data


def format_validation_error(exc: ValidationError) -> str:
    """Condense pydantic's multi-line report into one line naming each bad key."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown key '{loc}'")
        else:
            parts.append(f"'{loc}': {err['msg']} (got {err.get('input')!r})")
    return "; ".join(parts)


def resolve(
    config_cls: type[StudyConfig],
    presets: Mapping[str, Mapping[str, Any]],
    preset: str = "small",
    file: str | Path | None = None,
    sets: list[str] | tuple[str, ...] = (),
    planning: bool = False,
) -> StudyConfig:
    """Build a validated config: class defaults, then preset, then YAML file, then ``--set`` items,
    each merged into the one before (nested sections key by key, so a section whose default is an
    instance with its own values, such as a shared settings model with study-specific defaults,
    keeps them where a preset changes only some). ``planning``: for ``iclr-ray plan``, which reads
    no inputs, so a validator that asks for an input file lets its absence pass (it reads
    ``info.context["planning"]``)."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    raw: dict[str, Any] = deep_merge(config_cls().model_dump(mode="json"), presets.get(preset, {}))
    if file is not None:
        raw = deep_merge(raw, load_yaml_file(file))
    for item in sets:
        raw = deep_merge(raw, parse_set(item))
    try:
        return config_cls.model_validate(raw, context={"planning": planning})
    except ValidationError as exc:
        raise ConfigError(f"bad config: {format_validation_error(exc)}") from None


def to_yaml(cfg: BaseModel) -> str:
    """The resolved config as YAML, complete enough to rerun with ``--config``."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
