"""Grids of resumable trials: one Ray Tune trial per spec, each writing its result file once.

A study's trial body is ``body(config, trial_dir, **params) -> dict``: ``config`` is the trial's
Tune config (``{"spec": spec}`` in a grid), ``trial_dir`` its directory in the sweep's storage
(where a Ray Train run inside it keeps its checkpoints; a Path, or a URI string when the storage is
one: write there through :mod:`iclr_ray.storage`), and the dict it returns holds ``scores``
(the trial's last result in Tune) and whatever else the study keeps (curves, paths). The body may
``tune.report`` along the way. :func:`resumable` wraps it into a Tune function trainable that
writes the dict to ``final.json`` atomically and reports the scores; a trial restored after it had
finished (its ``final.json`` exists, Tune's last saved state predates it) reports the saved scores
instead of running again. :func:`run_grid` runs a list of specs as a grid, resuming an interrupted
grid in the same directory, and returns one :class:`GridTrial` per spec, in spec order.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..resources import Unplaceable
from ..storage import is_file, join, read_text, uri_of, write_text
from .tuner import run_tuner, trial_storage_dir

FINAL = "final.json"


def resumable(body: Callable[..., dict[str, Any]]) -> Callable[..., None]:
    """A Tune function trainable around ``body`` (see the module docstring)."""

    @functools.wraps(body)
    def trial(config: dict[str, Any], **params: Any) -> None:
        from ray import tune

        trial_dir = trial_storage_dir()
        final = join(trial_dir, FINAL)
        if is_file(final):
            tune.report(json.loads(read_text(final))["scores"])
            return
        out = body(config, trial_dir, **params)
        write_text(final, json.dumps(out))
        tune.report(out["scores"])

    return trial


@dataclass
class GridTrial:
    spec: dict[str, Any]
    final: dict[str, Any] | None
    """what the trial body returned (final.json); None for a trial that did not finish (stopped
    by a scheduler, or failed)"""
    metrics: dict[str, Any]
    """the last result the trial reported to Tune"""
    error: str | None
    path: str | None
    """the trial's directory in the sweep's storage (a local path or a URI)"""


def _cause(error: BaseException) -> str:
    """The trial's own exception where Tune wrapped it (its last line names it)."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else repr(error)


def _raise_unplaceable(error: BaseException) -> None:
    """A trial that failed because its request fits no node fails the grid with that one line
    (exit 2), not a traceback: it is the config's error, the same for every trial."""
    seen = error
    while seen is not None:
        if isinstance(seen, Unplaceable):
            raise Unplaceable(str(seen).strip().splitlines()[-1].split("Unplaceable: ", 1)[-1])
        seen = seen.__cause__ or getattr(seen, "cause", None)
    text = str(error)
    if "Unplaceable: " in text:
        raise Unplaceable(text.rsplit("Unplaceable: ", 1)[1].strip().splitlines()[0])


def _key(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, default=str)


def run_grid(trial: Callable[..., None], specs: Sequence[dict[str, Any]], *, storage: str | Path, name: str,
             max_concurrent_trials: int, scheduler=None, allow_unfinished: bool = False,
             **params: Any) -> list[GridTrial]:
    """Every spec as one trial of ``trial`` (``params`` reach it through ``tune.with_parameters``,
    so large values go through the object store once); results in spec order.

    A failed trial raises, naming its spec's ``label``, unless ``allow_unfinished`` (a scheduler
    that stops trials early makes unfinished ones part of the result)."""
    from ray import tune

    trainable = tune.with_parameters(trial, **params) if params else trial
    results = run_tuner(trainable, {"spec": tune.grid_search(list(specs))}, storage_path=storage, name=name,
                        max_concurrent_trials=max_concurrent_trials, scheduler=scheduler, resume=True)
    order = {_key(s): i for i, s in enumerate(specs)}
    out: list[GridTrial | None] = [None] * len(specs)
    for r in results:
        error = None if r.error is None else _cause(r.error)
        if "spec" not in (r.config or {}):  # Tune could not even start it
            raise RuntimeError(f"a trial of the grid {name} failed before it started: {error}")
        spec = dict(r.config["spec"])
        path = uri_of(r.filesystem, r.path) if r.path else None
        final = join(path, FINAL) if path else None
        if error and not allow_unfinished:
            _raise_unplaceable(r.error)
            raise RuntimeError(f"trial {spec.get('label', spec)} failed: {error}")
        done = json.loads(read_text(final)) if final and is_file(final) else None
        out[order[_key(spec)]] = GridTrial(spec, done, dict(r.metrics or {}), error, path)
    missing = [specs[i].get("label", i) for i, t in enumerate(out) if t is None]
    if missing:
        raise RuntimeError(f"the grid {name} returned no result for {missing}")
    return out  # type: ignore[return-value]
