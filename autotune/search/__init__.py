"""The Optuna study: sampler, pruner, first trials, dedupe and infeasibility skipping."""

from autotune.search._feasibility import InfeasibleSet, needs_at_least_as_much_memory
from autotune.search._pruner import RelativeToBestPruner, clearly_slow, completed_values
from autotune.search._search import (
    MeasureFn,
    Observation,
    SearchState,
    enqueue_first_trials,
    fail_interrupted_trials,
    off_grid_baseline,
    run_search,
)
from autotune.search._study import make_sampler, open_study, study_name_for

__all__ = [
    "InfeasibleSet",
    "MeasureFn",
    "Observation",
    "RelativeToBestPruner",
    "SearchState",
    "clearly_slow",
    "completed_values",
    "enqueue_first_trials",
    "fail_interrupted_trials",
    "make_sampler",
    "needs_at_least_as_much_memory",
    "off_grid_baseline",
    "open_study",
    "run_search",
    "study_name_for",
]
