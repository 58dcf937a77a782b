"""The Optuna study: sampler, pruner, first trials, dedupe and infeasibility skipping."""

from autotune.search._feasibility import InfeasibleSet, memory_pressure
from autotune.search._pruner import RelativeToBestPruner, clearly_slow, completed_values
from autotune.search._search import (
    EXACT_CONFIG_ATTR,
    MeasureFn,
    Observation,
    SearchState,
    enqueue_first_trials,
    exact_config,
    fail_interrupted_trials,
    run_search,
)
from autotune.search._study import make_sampler, open_study, study_name_for

__all__ = [
    "EXACT_CONFIG_ATTR",
    "InfeasibleSet",
    "MeasureFn",
    "Observation",
    "RelativeToBestPruner",
    "SearchState",
    "clearly_slow",
    "completed_values",
    "enqueue_first_trials",
    "exact_config",
    "fail_interrupted_trials",
    "make_sampler",
    "memory_pressure",
    "open_study",
    "run_search",
    "study_name_for",
]
