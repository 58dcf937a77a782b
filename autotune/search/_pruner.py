"""Stopping clearly slow trials early."""

from __future__ import annotations

from collections.abc import Sequence

import optuna
from optuna.trial import TrialState

#: A trial is stopped when its throughput so far is below this share of the best finished one.
PRUNE_RATIO = 0.5
#: ... once at least this many trials have finished and it has reported this many times.
MIN_COMPLETED = 3
MIN_REPORTS = 2


def completed_values(study: optuna.Study) -> list[float]:
    """The positive values of the study's finished trials (read before a trial starts)."""
    return [
        t.value
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.value is not None and t.value > 0
    ]


def clearly_slow(
    intermediate: Sequence[float],
    finished: Sequence[float],
    ratio: float = PRUNE_RATIO,
    min_completed: int = MIN_COMPLETED,
    min_reports: int = MIN_REPORTS,
) -> bool:
    """Whether a trial's latest throughput is below ``ratio`` x the best finished one.

    Unlike a median rule, this only stops trials that are clearly slow: measurements are noisy,
    and a configuration near the best deserves its full window.

    Example:
        >>> clearly_slow([40.0, 45.0], [100.0, 120.0, 90.0])
        True
        >>> clearly_slow([70.0, 75.0], [100.0, 120.0, 90.0])
        False
    """
    if len(intermediate) < min_reports or len(finished) < min_completed:
        return False
    return intermediate[-1] < ratio * max(finished)


def compile_allowance(
    run_samples: int | None, finished: Sequence[float], ratio: float = PRUNE_RATIO
) -> float | None:
    """Seconds of compiling after which a trial cannot reach ``ratio`` x the best finished
    throughput over a run of ``run_samples`` (compile included), however fast it then steps;
    None when the run's length or a finished trial is unknown.

    The run's throughput is ``run_samples / (compile_s + run_samples / samples_per_s)``, at
    most ``run_samples / compile_s``: a bound, not a prediction.

    Example:
        >>> round(compile_allowance(4096, [38_900.0, 34_570.0]), 3)  # text-transformer's epoch
        0.211
        >>> compile_allowance(None, [38_900.0]) is None
        True
    """
    if run_samples is None or not finished:
        return None
    return run_samples / (ratio * max(finished))
