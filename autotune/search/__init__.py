"""The Optuna study: sampler, queued configurations, pruning rule, dedupe and infeasibility."""

from autotune.search._feasibility import InfeasibleSet, needs_at_least_as_much_memory
from autotune.search._params import config_from_params, params_of, suggest_config
from autotune.search._pruner import clearly_slow, compile_allowance, completed_values
from autotune.search._search import (
    CEILING_SHARE,
    MIN_IMPROVEMENT,
    CeilingFn,
    MeasureFn,
    Observation,
    SearchState,
    at_ceiling,
    enqueue_candidates,
    enqueue_first_trials,
    fail_interrupted_trials,
    off_grid_baseline,
    run_search,
)
from autotune.search._study import make_sampler, open_study, ordinal_params, study_name_for
from autotune.search._warmup_pruner import hopeless_in_warmup

__all__ = [
    "CEILING_SHARE",
    "MIN_IMPROVEMENT",
    "CeilingFn",
    "InfeasibleSet",
    "MeasureFn",
    "Observation",
    "SearchState",
    "at_ceiling",
    "clearly_slow",
    "compile_allowance",
    "completed_values",
    "config_from_params",
    "enqueue_candidates",
    "enqueue_first_trials",
    "fail_interrupted_trials",
    "hopeless_in_warmup",
    "make_sampler",
    "needs_at_least_as_much_memory",
    "off_grid_baseline",
    "open_study",
    "ordinal_params",
    "params_of",
    "run_search",
    "study_name_for",
    "suggest_config",
]
