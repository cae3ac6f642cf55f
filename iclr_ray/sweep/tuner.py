"""Running a sweep: a Ray Tune ``Tuner`` over function trainables that each drive a Ray Train run
(the Train V2 pattern: the trial builds a ``TorchTrainer`` and forwards its reports with
``TuneReportCallback``), written so trials never wait on each other forever on a small machine.

Each trial holds a sliver of CPU (0.01) and its Train workers the rest (0.99 each, see
``llm.train.fit``), so ``max_concurrent_trials`` trials of one worker each fit a 2-CPU machine.
Results land in ``storage_path/name`` (a local path or a URI such as ``s3://bucket/...``): Tune's own experiment state (``Tuner.restore`` resumes an
interrupted sweep from it), per-trial ``result.json``/``progress.csv`` and TensorBoard event files
(``tensorboard --logdir storage_path/name``).

Tune copies its state files into the sweep directory in place, so a driver killed during that
copy leaves a cut-off ``experiment_state-*.json`` (``Tuner.restore`` then silently restarts the
sweep from nothing, with an empty search space) or a mix of two saves. :class:`KeepLastGoodState`
keeps a consistent copy of each save and :func:`repair_state` puts it back before a restore.
"""
from __future__ import annotations

import json
import logging
import os
import pickle
from pathlib import Path
from typing import Any, Callable, Mapping

from ray.tune import Callback

from .. import storage
from ..resources import TRIAL_CPU

STATE_BACKUP = ".last_good_state"
STATE_PERIOD_S = "5"  # Tune's experiment-state period (its "auto" is >= 10 s); the files are small
log = logging.getLogger(__name__)


STATE_PREFIXES = ("experiment_state-", "basic-variant-state-", "search_gen_state-", "searcher-state-",
                  "callback-states-")


def _state_files(location: str) -> dict[str, list[str]]:
    """Tune's state files at the top of ``location`` (a path or a URI), as their names, grouped by
    the session that wrote them (the timestamp in ``experiment_state-<session>.json``,
    ``basic-variant-state-<session>.json``, ...)."""
    groups: dict[str, list[str]] = {}
    for name in storage.list_files(location):
        if "/" in name:
            continue
        for prefix in STATE_PREFIXES:
            suffix = name[name.rfind("."):] if "." in name else ""
            if name.startswith(prefix) and suffix in (".json", ".pkl"):
                groups.setdefault(name[len(prefix):-len(suffix)], []).append(name)
    return groups


def _complete(name: str, data: bytes) -> bool:
    """Whether a Tune state file is whole: the experiment state is JSON, the searcher and
    callback states are (cloud)pickles, whatever their suffix."""
    try:
        if name.startswith("experiment_state-"):
            json.loads(data)
        else:
            pickle.loads(data)
        return True
    except Exception:  # a cut-off file fails in many ways: ValueError, EOFError, UnpicklingError, ...
        return False


class KeepLastGoodState(Callback):
    """Driver-side Tune callback keeping a whole, consistent copy of the sweep's state.

    Tune writes its state files (experiment, searcher, callbacks) one after another into a local
    staging directory in the driver's main loop, then copies them into the sweep's storage in a
    background thread. A driver killed during that copy leaves a cut-off file, or a mix of two
    saves (a searcher that has generated a trial the experiment state does not list yet, which a
    restore then never runs). So after each controller step (which follows any save), this copies
    the staging set, when it changed, into ``STATE_BACKUP/<session>.<n>/`` of the storage and then
    points ``STATE_BACKUP/<session>.current`` at it (one atomic write): a kill at any moment leaves
    the previous set or the new one, never a mix. :func:`repair_state` puts it back."""

    def __init__(self, location: str | Path):
        self.location = storage.normalise(location)
        self._seen: dict[str, tuple[int, int]] = {}
        self._n = 0

    def snapshot(self, staging: Path) -> None:
        for session, names in _state_files(str(staging)).items():
            files = [staging / n for n in names]
            keys = {f.name: (st.st_mtime_ns, st.st_size) for f in files for st in [f.stat()]}
            if all(self._seen.get(k) == v for k, v in keys.items()):
                continue
            data = {f.name: f.read_bytes() for f in files}
            if not all(_complete(n, d) for n, d in data.items()):
                continue
            backup = storage.join(self.location, STATE_BACKUP)
            self._n += 1
            target = f"{session}.{self._n}"
            for n, d in data.items():
                storage.write_bytes(storage.join(backup, target, n), d)
            pointer = storage.join(backup, f"{session}.current")
            old = storage.read_text(pointer).strip() if storage.is_file(pointer) else None
            storage.write_text(pointer, target)
            if old and old != target:
                storage.delete(storage.join(backup, old))
            self._seen.update(keys)

    def on_step_end(self, iteration, trials, **info):
        if trials:
            self.snapshot(Path(trials[0].storage.experiment_driver_staging_path))

    def on_experiment_end(self, trials, **info):
        self.on_step_end(0, trials)


def repair_state(location: str | Path) -> dict[str, str]:
    """Before ``Tuner.restore``: for each session's state files in the sweep at ``location`` (a path
    or a URI), newest first, put back the last consistent copy :class:`KeepLastGoodState` made; a
    session with no copy is a driver killed in its first seconds, and its files go if any is cut
    off. Stops at the first session whose state is whole (``Tuner.restore`` reads only the newest).
    Returns ``{session: "restored" | "removed" | "kept"}``."""
    location = storage.normalise(location)
    out: dict[str, str] = {}
    for session, names in sorted(_state_files(location).items(), reverse=True):
        files = {n: storage.read_bytes(storage.join(location, n)) for n in names}
        pointer = storage.join(location, STATE_BACKUP, f"{session}.current")
        copy = storage.join(location, STATE_BACKUP, storage.read_text(pointer).strip()) if storage.is_file(pointer) \
            else None
        good = {n: storage.read_bytes(storage.join(copy, n)) for n in storage.list_files(copy)} if copy else {}
        if good:
            if files == good:
                out[session] = "kept"
                return out
            for n in names:
                storage.delete(storage.join(location, n))
            for n, d in good.items():
                storage.write_bytes(storage.join(location, n), d)
            out[session] = "restored"
            return out
        if all(_complete(n, d) for n, d in files.items()):
            out[session] = "kept"
            return out
        for n in names:
            storage.delete(storage.join(location, n))
        out[session] = "removed"
    return out


def can_restore(location: str | Path) -> bool:
    """A sweep at ``location`` that ``Tuner.restore`` can continue: its pickled Tuner is complete
    and its newest experiment state is whole (call :func:`repair_state` first)."""
    location = storage.normalise(location)
    names = list(storage.list_files(location))
    states = sorted(n for n in names if n.startswith("experiment_state-") and n.endswith(".json"))
    tuner = storage.join(location, "tuner.pkl")
    return ("tuner.pkl" in names and len(storage.read_bytes(tuner)) > 0 and bool(states)
            and _complete(states[-1], storage.read_bytes(storage.join(location, states[-1]))))


def run_tuner(trainable: Callable[[dict], None], param_space: Mapping[str, Any], *, storage_path: str | Path,
              name: str, max_concurrent_trials: int = 2, num_samples: int = 1, scheduler=None,
              resume: bool = False, verbose: int = 1):
    """Fit (or, with ``resume`` and an experiment already at ``storage_path/name``, restore and
    finish) a sweep; returns Tune's ``ResultGrid``.

    No metric is given to Tune itself: trials report their score only once, at the end, and Tune
    would reject the per-step reports without it; rank with ``ResultGrid.get_best_result(metric,
    mode)`` or :func:`~iclr_ray.sweep.grid.run_grid`."""
    from ray import tune

    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", STATE_PERIOD_S)
    root = storage.normalise(storage_path)
    if not storage.is_remote(root):
        storage.local_path(root).mkdir(parents=True, exist_ok=True)
    resourced = tune.with_resources(trainable, {"cpu": TRIAL_CPU})
    path = storage.join(root, name)
    if resume and storage.exists(path):
        for session, what in repair_state(path).items():
            if what != "kept":
                log.warning("sweep state of session %s at %s: %s (from the last consistent copy)", session, path,
                            what)
    if resume and can_restore(path):
        tuner = tune.Tuner.restore(path, trainable=resourced, resume_unfinished=True, resume_errored=True)
    else:
        if resume and storage.exists(path):
            log.warning("no complete sweep state at %s: starting the sweep again", path)
        tuner = tune.Tuner(
            resourced,
            param_space=dict(param_space),
            tune_config=tune.TuneConfig(scheduler=scheduler, num_samples=num_samples,
                                        max_concurrent_trials=max_concurrent_trials),
            run_config=tune.RunConfig(name=name, storage_path=root, verbose=verbose,
                                      callbacks=[KeepLastGoodState(path)]),
        )
    return tuner.fit()


def summarise(results, space, columns: list[str]) -> dict[str, Any]:
    """A finished sweep (Tune's ``ResultGrid``) as its result.json summary: one row per trial (its
    values of the space's params, the space's metric, the ``columns`` it reported, whether it
    finished (reported the metric), its error's first line), the best row, the metric and mode;
    ``results.ranking`` shows the rows with ``columns`` beside the metric."""
    rows = []
    for r in results:
        m = dict(r.metrics or {})
        rows.append({"params": {k: (r.config or {}).get(k) for k in space.params}, space.metric: m.get(space.metric),
                     **{k: m.get(k) for k in columns}, "finished": m.get(space.metric) is not None,
                     "error": None if r.error is None else str(r.error).splitlines()[0]})
    ranked = sorted((r for r in rows if r[space.metric] is not None), key=lambda r: r[space.metric],
                    reverse=space.mode == "max")
    return {"trials": len(rows), "finished": sum(r["finished"] for r in rows), "rows": rows,
            "best": ranked[0] if ranked else None, "metric": space.metric, "mode": space.mode,
            "columns": list(columns)}


def trial_storage_dir() -> Path | str:
    """Inside a trial: its directory in the sweep's storage, the one ``ResultGrid`` paths point at
    and a resumed sweep finds again: a local Path, or a URI string (``s3://...``) when the sweep's
    storage is one. (``get_trial_dir()`` is a working copy in this Ray session's temp dir on the
    trial's node, which a restarted driver or another node does not see.)"""
    from ray import tune

    ctx = tune.get_context()
    trial_storage = ctx.get_storage()
    if trial_storage is None:
        return Path(ctx.get_trial_dir())
    location = storage.uri_of(trial_storage.storage_filesystem, trial_storage.trial_fs_path)
    return location if storage.is_remote(location) else Path(location)


def thinned_tune_report(total_steps: int, dense_until: float = 0.2, reports: int = 40):
    """``TuneReportCallback`` forwarding only some Train reports to Tune: every step while
    ``progress <= dense_until`` (the early window the scheduler reads), then about ``reports``
    evenly spaced ones, plus every report with a checkpoint or a held-out loss and the last.

    Tune's driver does real work for each result (files, TensorBoard, status), so forwarding every
    step of small, fast trials keeps a core of a small machine busy with bookkeeping. The full
    curve is still in the Train run's steps.jsonl."""
    from ray.tune.integration.ray_train import TuneReportCallback

    every = max(1, total_steps // reports)

    class ThinnedTuneReport(TuneReportCallback):
        def after_report(self, run_context, metrics, checkpoint):
            m = metrics[0] if metrics else {}
            step, progress = int(m.get("step", 0)), float(m.get("progress", 0.0))
            if (checkpoint is not None or "eval_loss" in m or progress <= dense_until or progress >= 1.0
                    or step % every == 0):
                super().after_report(run_context, metrics, checkpoint)

    return ThinnedTuneReport()
