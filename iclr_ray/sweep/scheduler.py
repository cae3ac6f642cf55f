"""A Ray Tune scheduler built on the SFT paper's early-termination finding: early in training,
a lower gradient norm (and a higher loss) predicts a better final model, so trials whose early
profile ranks among the worst can be stopped after a short window.

The window counts training rows seen (samples), not steps or a share of each trial's budget, so
trials of different batch sizes are compared on the same amount of data (a batch of 8 reaches a
384-row window in 48 steps, a batch of 128 in 3). Trials report ``samples`` (rows seen to the end
of the step) with every result. While a trial is inside the window its ``grad_norm`` and ``loss``
are averaged; when it first reports ``samples`` at or past the window, its early statistic joins
those of the trials that got there before it (asynchronously, as ASHA's rungs do) and the trial is
stopped when the statistic ranks worse than the ``keep`` quantile of them. Only decisions made once
``min_trials`` trials have a statistic stop anything. Which statistic: ``grad_norm`` (lower
predicts better), ``loss`` (higher predicts better) or ``both`` (the mean of the two ranks). Equal
statistics rank equally, so trials the profile cannot tell apart are never told apart by the order
they arrived in (when every grad norm read 0, before the training loop took its own norm at ZeRO
stage 0, the old ordinal ranks stopped the later arrivals).
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

Predictor = Literal["grad_norm", "loss", "both"]


def early_rank_score(grad_norms: list[float], losses: list[float], predictor: Predictor) -> np.ndarray:
    """Badness of each trial's early profile (higher: predicted worse final score), as a
    fraction rank in [0, 1] so grad norm and loss combine on one scale; ties share their mean rank."""
    from scipy.stats import rankdata

    g, loss = np.asarray(grad_norms, float), np.asarray(losses, float)
    n = len(g)

    def frac_rank(x: np.ndarray) -> np.ndarray:
        return (rankdata(x, method="average") - 1) / max(n - 1, 1)

    if predictor == "grad_norm":
        return frac_rank(g)
    if predictor == "loss":
        return frac_rank(-loss)
    return (frac_rank(g) + frac_rank(-loss)) / 2


class EarlyDynamicsStopper(FIFOScheduler):
    def __init__(self, window_rows: int, keep: float = 0.5, predictor: Predictor = "grad_norm",
                 min_trials: int = 3, samples_attr: str = "samples"):
        super().__init__()
        if window_rows < 1:
            raise ValueError(f"window_rows must be a positive number of rows, got {window_rows}")
        if not 0 < keep <= 1:
            raise ValueError(f"keep must be in (0, 1], got {keep}")
        self.window_rows, self.keep, self.predictor = window_rows, keep, predictor
        self.min_trials, self.samples_attr = max(1, min_trials), samples_attr
        self._early: dict[str, list[tuple[float, float]]] = {}
        self.profiles: dict[str, tuple[float, float]] = {}
        """trial id -> (mean early grad norm, mean early loss), for trials past the window"""
        self.stopped: dict[str, int] = {}
        """trial id -> rows seen when it was stopped"""

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        samples = result.get(self.samples_attr)
        if samples is None or trial.trial_id in self.profiles:
            return TrialScheduler.CONTINUE
        early = self._early.setdefault(trial.trial_id, [])
        # the profile: the steps within the window (at least the first), as the study measures it
        if "grad_norm" in result and "loss" in result and (samples <= self.window_rows or not early):
            early.append((float(result["grad_norm"]), float(result["loss"])))
        if samples < self.window_rows or not early:
            return TrialScheduler.CONTINUE
        early = np.array(self._early.pop(trial.trial_id))
        self.profiles[trial.trial_id] = (float(early[:, 0].mean()), float(early[:, 1].mean()))
        if len(self.profiles) < self.min_trials:
            return TrialScheduler.CONTINUE
        ids = list(self.profiles)
        bad = early_rank_score([self.profiles[i][0] for i in ids], [self.profiles[i][1] for i in ids],
                               self.predictor)
        mine = bad[ids.index(trial.trial_id)]
        # keep the best `keep` share: a trial whose badness rank falls above it stops
        if mine > np.quantile(bad, self.keep) + 1e-12:
            self.stopped[trial.trial_id] = int(samples)
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE

    def debug_string(self) -> str:
        return (f"EarlyDynamicsStopper({self.predictor} over the first {self.window_rows} rows: "
                f"{len(self.profiles)} profiled, {len(self.stopped)} stopped)")
