"""Registry of studies. Each study package exports ``STUDY = Study(...)`` from its ``__init__``.

Study packages are imported only when asked for, so a study whose extra is not installed does
not break the others; ``iclr-ray list`` reports it as unavailable with the extra to install.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..config import ConfigError, StudyConfig

# study id -> the extra (pyproject optional dependency) its imports need beyond the core
IMPLEMENTED: dict[str, str | None] = {
    "arith_coupling": "llm",
    "coord_sketch": None,
    "mab_cs": None,
    "policy_decorator": "rl",
    "sft_recipe": "llm",
    "sparse_embed": None,
    "sphere_flow": None,
}


@dataclass(frozen=True)
class Study:
    id: str
    title: str
    paper: str
    ray: tuple[str, ...]
    config: type[StudyConfig]
    presets: Mapping[str, Mapping[str, Any]]
    run: Callable[..., dict[str, Any]]
    """run(cfg, ctx) -> metrics dict (JSON-serialisable)."""
    claims: Callable[..., list]
    """claims(metrics, cfg) -> list[Claim], a pure function so reports can be re-rendered."""
    prepare: Callable[[Any], Any] | None = None
    """prepare(cfg) -> inputs: reads and checks input files before Ray starts (errors exit 2)."""
    report_md: Callable[[dict[str, Any]], str] | None = None
    """report_md(metrics) -> extra markdown (tables) for report.md."""
    sweep: Callable[..., dict[str, Any]] | None = None
    """sweep(cfg, space, ctx, scheduler, resume) -> summary dict: ``iclr-ray sweep`` (Ray Tune)."""
    sweepable: tuple[str, ...] = ()
    """config key prefixes a search space may vary (the rest is shared by every trial)."""


class StudyUnavailable(RuntimeError):
    pass


def get(study_id: str) -> Study:
    if study_id not in IMPLEMENTED:
        known = ", ".join(sorted(IMPLEMENTED))
        raise ConfigError(f"unknown study {study_id!r}; implemented: {known}")
    try:
        module = importlib.import_module(f"{__name__}.{study_id}")
    except ImportError as exc:
        extra = IMPLEMENTED[study_id]
        hint = f"; install it with: pip install 'iclr-ray[{extra}]'" if extra else ""
        raise StudyUnavailable(f"study {study_id!r} needs {exc.name or exc}{hint}") from None
    return module.STUDY


def available() -> list[tuple[str, Study | None, str]]:
    """(id, study or None, reason) for every implemented study."""
    out = []
    for study_id in IMPLEMENTED:
        try:
            out.append((study_id, get(study_id), ""))
        except StudyUnavailable as exc:
            out.append((study_id, None, str(exc)))
    return out
