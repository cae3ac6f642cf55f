"""Running a sweep: a Ray Tune ``Tuner`` over function trainables that each drive a Ray Train run
(the Train V2 pattern: the trial builds a ``TorchTrainer`` and forwards its reports with
``TuneReportCallback``), written so trials never wait on each other forever on a small machine.

Each trial holds a sliver of CPU (0.01) and its Train workers the rest (0.99 each, see
``llm.train.fit``), so ``max_concurrent_trials`` trials of one worker each fit a 2-CPU machine.
Results land in ``storage_path/name``: Tune's own experiment state (``Tuner.restore`` resumes an
interrupted sweep from it), per-trial ``result.json``/``progress.csv`` and TensorBoard event files
(``tensorboard --logdir storage_path/name``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

TRIAL_CPU = 0.01


def run_tuner(trainable: Callable[[dict], None], param_space: Mapping[str, Any], *, storage_path: str | Path,
              name: str, max_concurrent_trials: int = 2, num_samples: int = 1, scheduler=None,
              resume: bool = False, verbose: int = 1):
    """Fit (or, with ``resume`` and an experiment already at ``storage_path/name``, restore and
    finish) a sweep; returns Tune's ``ResultGrid``.

    No metric is given to Tune itself: trials report their score only once, at the end, and Tune
    would reject the per-step reports without it; rank with ``ResultGrid.get_best_result(metric,
    mode)`` or :func:`trial_rows`."""
    from ray import tune

    storage = Path(storage_path).resolve()
    storage.mkdir(parents=True, exist_ok=True)
    resourced = tune.with_resources(trainable, {"cpu": TRIAL_CPU})
    path = storage / name
    if resume and tune.Tuner.can_restore(str(path)):
        tuner = tune.Tuner.restore(str(path), trainable=resourced, resume_unfinished=True, resume_errored=True)
    else:
        tuner = tune.Tuner(
            resourced,
            param_space=dict(param_space),
            tune_config=tune.TuneConfig(scheduler=scheduler, num_samples=num_samples,
                                        max_concurrent_trials=max_concurrent_trials),
            run_config=tune.RunConfig(name=name, storage_path=str(storage), verbose=verbose),
        )
    return tuner.fit()


def thinned_tune_report(total_steps: int, dense_until: float = 0.2, reports: int = 40):
    """``TuneReportCallback`` forwarding only some Train reports to Tune: every step while
    ``progress <= dense_until`` (the early window the scheduler reads), then about ``reports``
    evenly spaced ones, plus every report with a checkpoint or a held-out loss and the last.

    Tune's driver spends ~0.5 s of CPU on each result (files, TensorBoard, status); forwarding
    every step of two trials kept one of the two cores busy with bookkeeping. The full curve is
    still in the Train run's steps.jsonl."""
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


def trial_rows(results) -> list[dict[str, Any]]:
    """One record per trial of a ResultGrid: its config, last metrics, error and directory."""
    rows = []
    for r in results:
        rows.append({"config": dict(r.config or {}), "metrics": dict(r.metrics or {}),
                     "error": None if r.error is None else str(r.error).splitlines()[0],
                     "path": r.path})
    return rows
