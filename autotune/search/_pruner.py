"""Stopping clearly slow trials early."""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState


class RelativeToBestPruner(optuna.pruners.BasePruner):
    """Prune a trial whose intermediate throughput is below ``ratio`` x the best final one.

    Unlike a median rule, this only stops trials that are clearly slow: measurements are noisy,
    and a configuration near the best deserves its full window.
    """

    def __init__(self, ratio: float = 0.5, min_completed: int = 3, min_reports: int = 2) -> None:
        self.ratio = ratio
        self.min_completed = min_completed
        self.min_reports = min_reports

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or len(trial.intermediate_values) < self.min_reports:
            return False
        finished = [
            t.value for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.value is not None and t.value > 0
        ]
        if len(finished) < self.min_completed:
            return False
        return trial.intermediate_values[step] < self.ratio * max(finished)
