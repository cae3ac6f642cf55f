"""A Ray Tune scheduler built on the SFT paper's early-termination finding: early in training,
a lower gradient norm (and a higher loss) predicts a better final model, so trials whose early
profile ranks among the worst can be stopped after a short window.

Trials report ``progress`` (fraction of their budget done) with every result. While a trial is
inside the window its ``grad_norm`` and ``loss`` are averaged; when it first reports progress at
or past the window, its early statistic joins those of the trials that got there before it
(asynchronously, as ASHA's rungs do) and the trial is stopped when the statistic ranks worse
than the ``keep`` quantile of them. Only decisions made once ``min_trials`` trials have a
statistic stop anything. Which statistic: ``grad_norm`` (lower predicts better), ``loss``
(higher predicts better) or ``both`` (the mean of the two ranks).
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

Predictor = Literal["grad_norm", "loss", "both"]


def early_rank_score(grad_norms: list[float], losses: list[float], predictor: Predictor) -> np.ndarray:
    """Badness of each trial's early profile (higher: predicted worse final score), as a
    fraction rank in [0, 1] so grad norm and loss combine on one scale."""
    g, loss = np.asarray(grad_norms, float), np.asarray(losses, float)
    n = len(g)

    def frac_rank(x: np.ndarray) -> np.ndarray:
        return np.argsort(np.argsort(x, kind="stable"), kind="stable") / max(n - 1, 1)

    if predictor == "grad_norm":
        return frac_rank(g)
    if predictor == "loss":
        return frac_rank(-loss)
    return (frac_rank(g) + frac_rank(-loss)) / 2


class EarlyDynamicsStopper(FIFOScheduler):
    def __init__(self, window: float = 0.1, keep: float = 0.5, predictor: Predictor = "grad_norm",
                 min_trials: int = 3, progress_attr: str = "progress"):
        super().__init__()
        if not 0 < window < 1:
            raise ValueError(f"window must be in (0, 1), got {window}")
        if not 0 < keep <= 1:
            raise ValueError(f"keep must be in (0, 1], got {keep}")
        self.window, self.keep, self.predictor = window, keep, predictor
        self.min_trials, self.progress_attr = max(1, min_trials), progress_attr
        self._early: dict[str, list[tuple[float, float]]] = {}
        self.profiles: dict[str, tuple[float, float]] = {}
        """trial id -> (mean early grad norm, mean early loss), for trials past the window"""
        self.stopped: dict[str, float] = {}
        """trial id -> progress at which it was stopped"""

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        progress = result.get(self.progress_attr)
        if progress is None or trial.trial_id in self.profiles:
            return TrialScheduler.CONTINUE
        early = self._early.setdefault(trial.trial_id, [])
        # the profile: the steps within the window (at least the first), as the study measures it
        if "grad_norm" in result and "loss" in result and (progress <= self.window + 1e-9 or not early):
            early.append((float(result["grad_norm"]), float(result["loss"])))
        if progress < self.window or not early:
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
            self.stopped[trial.trial_id] = float(progress)
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE

    def debug_string(self) -> str:
        return (f"EarlyDynamicsStopper({self.predictor} over the first {self.window:.0%}: "
                f"{len(self.profiles)} profiled, {len(self.stopped)} stopped)")
