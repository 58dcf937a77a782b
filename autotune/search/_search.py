"""The search loop: ask Optuna for a configuration, skip what is known, measure the rest."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import optuna
from optuna.trial import TrialState

from autotune.search._feasibility import InfeasibleSet
from autotune.space import Config, SearchSpace

#: Asks in a row that produce nothing new before the space counts as exhausted.
MAX_FRUITLESS_ASKS = 200


@dataclass(frozen=True)
class Observation:
    """What the search needs to know about one measured configuration."""

    value: float  # samples/s; 0 for a configuration that failed or broke the budget
    pruned: bool = False
    out_of_memory: bool = False
    cancelled: bool = False


#: Measures one configuration for an Optuna trial in the given phase.
MeasureFn = Callable[[Config, str, optuna.Trial], Observation]
SkipFn = Callable[[Config, str], None]


@dataclass
class SearchState:
    """What the search has already seen: measured configurations and infeasible ones."""

    infeasible: InfeasibleSet
    values: dict[str, float] = field(default_factory=dict)
    measured: int = 0
    skipped: int = 0
    exhausted: bool = False

    def remember(self, config: Config, observation: Observation) -> None:
        self.values[config.key()] = observation.value
        self.measured += 1
        if observation.out_of_memory:
            self.infeasible.add(config)


def enqueue_first_trials(study: optuna.Study, space: SearchSpace) -> None:
    """The baseline first, then the seeds' checklist (only for a new study)."""
    if study.get_trials(deepcopy=False):
        return
    baseline, checklist = space.baseline(), space.checklist()
    study.enqueue_trial(space.params_of(baseline), user_attrs={"phase": "baseline"})
    if checklist.key() != baseline.key():
        study.enqueue_trial(space.params_of(checklist), user_attrs={"phase": "checklist"})


def fail_interrupted_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Close trials left running by a process that died; returns them for the caller to retry."""
    stale = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for frozen in stale:
        study.tell(frozen.number, state=TrialState.FAIL)
    return stale


def run_search(
    study: optuna.Study,
    space: SearchSpace,
    state: SearchState,
    measure: MeasureFn,
    n_trials: int,
    deadline: float | None = None,
    on_skip: SkipFn | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> SearchState:
    """Measure configurations until ``n_trials`` have been measured (resumed ones included).

    A configuration already measured is never measured again: Optuna is told its known value.
    One that needs at least the memory of a configuration that ran out is skipped unmeasured.
    """
    fruitless = 0
    while state.measured < n_trials and fruitless < MAX_FRUITLESS_ASKS:
        if (deadline is not None and time.monotonic() >= deadline) or (
            should_stop is not None and should_stop()
        ):
            break
        trial = study.ask()
        config = space.suggest(trial)
        phase = str(trial.user_attrs.get("phase", "search"))
        key = config.key()
        if key in state.values:
            trial.set_user_attr("duplicate", True)
            study.tell(trial, state.values[key])
            fruitless += 1
            continue
        reason = state.infeasible.reason(config)
        if reason is not None:
            trial.set_user_attr("skipped", reason)
            study.tell(trial, state=TrialState.PRUNED)
            state.skipped += 1
            fruitless += 1
            if on_skip is not None:
                on_skip(config, reason)
            continue
        fruitless = 0
        observation = measure(config, phase, trial)
        if observation.cancelled:
            study.tell(trial, state=TrialState.FAIL)
            break
        state.remember(config, observation)
        if observation.pruned:
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, observation.value)
    state.exhausted = fruitless >= MAX_FRUITLESS_ASKS
    return state
