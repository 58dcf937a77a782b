"""The search loop: ask Optuna for a configuration, skip what is known, measure the rest."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import optuna
from optuna.trial import TrialState

from autotune.search._feasibility import InfeasibleSet
from autotune.search._params import config_from_params, params_of, suggest_config
from autotune.search._study import ordinal_params
from autotune.space import Config, SearchSpace

#: Asks in a row that produce nothing new before an untried configuration is queued.
FRUITLESS_ASKS_BEFORE_NUDGE = 20
#: A measurement improves on the best only when it beats it by more than this share: smaller
#: gains are within a trial's run-to-run spread, and would keep a converged search going.
MIN_IMPROVEMENT = 0.02
#: The best measured has reached the profile's ceiling (the fastest it predicts anywhere in the
#: space) once it is within this share of it: a trial's run-to-run spread on a quiet machine
#: (about 5%, see ``benchmarks/RESULTS.md``). No configuration the profile foresees can then
#: gain beyond the noise; only one it mispredicts can, and the best's neighbours are still
#: measured for that before the search ends. A best above the ceiling by more than that share
#: has not reached it but broken through it (see :func:`at_ceiling`).
CEILING_SHARE = 0.95


@dataclass(frozen=True)
class Observation:
    """What the search needs to know about one measured configuration."""

    value: float  # samples/s; 0 for a configuration that failed or broke the budget
    pruned: bool = False
    out_of_memory: bool = False
    cancelled: bool = False
    #: The error of a trial that found a knob's value the step cannot use (``unsuited``): the
    #: value is set aside for the rest of the job.
    unsuited: str | None = None


#: Measures one configuration for an Optuna trial in the given phase.
MeasureFn = Callable[[Config, str, optuna.Trial], Observation]
SkipFn = Callable[[Config, str], None]
#: Why a proposal is not worth measuring beside the best configuration measured so far and its
#: value, or None.
JudgeFn = Callable[[Config, Config, float], str | None]
#: The fastest samples/s the profile predicts anywhere in the space: as it read it, as the
#: trials measured so far scale it, and on the highest scale a trial but the best ran at (see
#: :func:`at_ceiling`); or None.
CeilingFn = Callable[[], tuple[float, float, float] | None]


@dataclass
class SearchState:
    """What the search has already seen: measured configurations and infeasible ones."""

    infeasible: InfeasibleSet
    values: dict[str, float] = field(default_factory=dict)
    measured: int = 0
    skipped: int = 0
    #: Proposals skipped because the profile predicted them far slower than the best.
    skipped_slow: int = 0
    exhausted: bool = False
    #: The search stopped before its budget: ``patience`` measurements in a row improved
    #: nothing, or the best reached the profile's ceiling (``at_ceiling``), and no neighbour
    #: of the best improved on it (see :func:`run_search`).
    converged: bool = False
    at_ceiling: bool = False
    #: Configurations skipped, as infeasible or predicted too slow (told to the study once,
    #: as pruned).
    skipped_keys: set[str] = field(default_factory=set)
    #: The best complete measurement so far, and the measurements since one improved on the
    #: one before by more than :data:`MIN_IMPROVEMENT`.
    best: float = 0.0
    since_improvement: int = 0
    #: The configuration that measured ``best``, and the bests whose adjacent configurations
    #: were queued before the search could end as converged, the last of them at ``refined_at``
    #: samples/s.
    best_config: Config | None = None
    refined: set[str] = field(default_factory=set)
    refined_at: float = 0.0

    def skip(self, config: Config, predicted_slow: bool) -> None:
        """Count ``config`` as skipped unmeasured (infeasible, or predicted too slow)."""
        self.skipped += not predicted_slow
        self.skipped_slow += predicted_slow
        self.skipped_keys.add(config.key())

    def remember(self, config: Config, observation: Observation) -> None:
        self.values[config.key()] = observation.value
        self.measured += 1
        if observation.out_of_memory:
            self.infeasible.add(config)
        if observation.unsuited is not None:
            self.infeasible.set_aside(config, observation.unsuited)
        if not observation.pruned and observation.value > self.best * (1 + MIN_IMPROVEMENT):
            self.since_improvement = 0
        else:
            self.since_improvement += 1
        if not observation.pruned and observation.value > self.best:
            self.best, self.best_config = observation.value, config

    def end_reason(self, budget: int) -> str:
        """Why the search ended: ``budget``, ``converged``, ``ceiling`` (converged with the best
        at the profile's ceiling), ``exhausted`` (nothing left to try) or ``stopped`` (a time
        budget or a cancel came first)."""
        if self.converged:
            return "ceiling" if self.at_ceiling else "converged"
        if self.exhausted:
            return "exhausted"
        return "budget" if self.measured >= budget else "stopped"


def _trial_params(trial: optuna.trial.FrozenTrial) -> dict[str, object]:
    """A trial's parameters; a waiting (enqueued) trial has only the ones it was queued with."""
    return {**trial.system_attrs.get("fixed_params", {}), **trial.params}


def enqueue_candidates(
    study: optuna.Study,
    space: SearchSpace,
    configs: Iterable[Config],
    phase: str,
    state: SearchState | None = None,
) -> list[Config]:
    """Queue configurations for the study to measure next, in the given order.

    Prior knowledge (a prediction, the seeds' checklist) enters the search this way. Skipped:
    a configuration outside the space, one any trial of the study already holds (measured,
    pruned, running, waiting or failed: calling this again on a resumed study queues nothing
    twice), and, with ``state``, one already measured or known not to fit in memory.

    Returns:
        The configurations queued.
    """
    ordinal = ordinal_params(study, space)
    known = {
        config_from_params(space, params).key()
        for t in study.get_trials(deepcopy=False)
        if (params := _trial_params(t)) or not space.searched
    }  # a trial just asked has none
    if state is not None:
        known |= set(state.values) | state.skipped_keys
    queued = []
    for config in configs:
        config = config.normalized()
        if config.key() in known or not space.contains(config):
            continue
        if state is not None and state.infeasible.reason(config) is not None:
            continue
        study.enqueue_trial(params_of(space, config, ordinal), user_attrs={"phase": phase})
        known.add(config.key())
        queued.append(config)
    return queued


def enqueue_first_trials(study: optuna.Study, space: SearchSpace) -> None:
    """The baseline first, then the seeds' checklist (only for a new study).

    A baseline off the grid is measured apart: see :func:`off_grid_baseline`.
    """
    if study.get_trials(deepcopy=False):
        return
    enqueue_candidates(study, space, [space.baseline()], "baseline")
    enqueue_candidates(study, space, [space.checklist()], "checklist")


def off_grid_baseline(space: SearchSpace, state: SearchState) -> Config | None:
    """The baseline when it lies off the searched grid and has not been measured yet.

    A baseline such as batch size 12 with 5 workers is measured exactly as given, outside
    Optuna: recording it at the nearest grid point would stop an exhaustive search from ever
    measuring that point.
    """
    baseline = space.baseline()
    if space.contains(baseline) or baseline.key() in state.values:
        return None
    return baseline


def fail_interrupted_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Close trials left running by a process that died; returns them for the caller to retry."""
    stale = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for frozen in stale:
        study.tell(frozen.number, state=TrialState.FAIL)
    return stale


def _queued(study: optuna.Study) -> bool:
    return bool(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def _untried_feasible(space: SearchSpace, state: SearchState, seed: int) -> Config | None:
    """An unmeasured configuration not known to be infeasible, picked at random (seeded): one
    never skipped where there is one, else one the judge ruled out."""
    configs = [
        c
        for c in space.all_configs()
        if c.key() not in state.values and state.infeasible.reason(c) is None
    ]
    fresh = [c for c in configs if c.key() not in state.skipped_keys]
    return random.Random(seed + state.measured).choice(fresh or configs) if configs else None


def _queue_adjacent(
    study: optuna.Study,
    space: SearchSpace,
    state: SearchState,
    out_of_reach: JudgeFn | None = None,
    on_skip: SkipFn | None = None,
) -> bool:
    """Queue the best's untried neighbours along the ordered knobs (see
    :meth:`SearchSpace.adjacent`), once per best; whether any was queued. A neighbour that
    ``out_of_reach`` judges unable to beat the best is skipped unmeasured instead.

    A converged search has measured the seeds and the sampler's proposals around them, not
    necessarily the batch or worker count next to its best, and a neighbour there can train
    faster in every paired round (evidence: ``benchmarks/log/``).

    The climb goes on from a new best only where it gained more than a trial's run-to-run
    spread (``1 - CEILING_SHARE``, 5%) on the best climbed from before: a neighbour a little
    faster is no evidence of a slope, and climbing on such gains spends the budget on
    neighbours that the confirmation then cannot order (evidence: ``benchmarks/log/``).
    """
    best = state.best_config
    if best is None or best.key() in state.refined:
        return False
    if state.refined and state.best <= state.refined_at * (2 - CEILING_SHARE):
        return False
    state.refined.add(best.key())
    state.refined_at = state.best
    neighbours = []
    for neighbour in space.adjacent(best):
        reason = None if out_of_reach is None else out_of_reach(neighbour, best, state.best)
        if reason is None:
            neighbours.append(neighbour)
        elif neighbour.key() not in state.values and neighbour.key() not in state.skipped_keys:
            state.skip(neighbour, predicted_slow=True)
            if on_skip is not None:
                on_skip(neighbour, reason)
    return bool(enqueue_candidates(study, space, neighbours, "search", state))


def at_ceiling(
    best: float, ceiling: float | None, scaled: float | None = None, highest: float | None = None
) -> bool:
    """Whether the best measured is within :data:`CEILING_SHARE` of the profile's ceiling, on
    either side; with ``scaled`` (the ceiling on the scale its trials ran at), anywhere from
    that share under the lower of the two to that share over the higher; with ``highest``
    (the ceiling on the highest scale a trial other than the best ran at), up to that share
    over it too.

    The profile reads each point in a fraction of a second, in one moment of a machine whose
    speed moves by a fifth within minutes, and the best is the fastest of several noisy trials:
    neither alone places the ceiling within 5%, so a best that only seemed to pass the ceiling
    would otherwise run the search's whole budget (evidence: ``benchmarks/log/``).

    A best above all of them by more than the noise, standing out from the other trials as
    well, shows the profile mispredicting the top of the space, through a knob it does not
    time: on a GPU the eager step it profiles knows nothing of ``torch.compile``, TF32 or
    cuDNN's autotuner, which the checklist's first trial already turns on (and whose trials set
    no scale). Other configurations it mispredicts may then gain too, so the search goes on as
    without a ceiling (``patience`` decides) rather than stopping at the best's neighbours.
    """
    if ceiling is None:
        return False
    low = min(ceiling, ceiling if scaled is None else scaled)
    high = max([ceiling, *(value for value in (scaled, highest) if value is not None)])
    return CEILING_SHARE * low <= best <= high / CEILING_SHARE


def run_search(
    study: optuna.Study,
    space: SearchSpace,
    state: SearchState,
    measure: MeasureFn,
    n_trials: int,
    on_skip: SkipFn | None = None,
    should_stop: Callable[[], bool] | None = None,
    seed: int = 0,
    patience: int = 0,
    predicted_slow: JudgeFn | None = None,
    ceiling: CeilingFn | None = None,
    out_of_reach: JudgeFn | None = None,
) -> SearchState:
    """Measure configurations until ``n_trials`` have been measured (resumed ones included).

    With ``patience``, the search ends sooner once every queued configuration (baseline,
    checklist, predicted seeds) has been measured and the last ``patience`` measurements
    improved nothing by more than :data:`MIN_IMPROVEMENT` (``state.converged``): the rest of
    the budget would mostly re-measure the noise around a settled best. Before it ends, the
    configurations adjacent to the best along the ordered knobs are queued (once per best),
    less those ``out_of_reach`` judges unable to beat the best (skipped as predicted slow);
    one of them that improves on it starts the count again. 0: the whole budget.
    With ``patience`` and a ``ceiling`` (the fastest samples/s the profile predicts anywhere in
    the space, as read and as the trials so far scale it: asked after each measurement), the
    search also ends that way, without waiting out the count, once the best is within
    :data:`CEILING_SHARE` of the ceiling (``state.at_ceiling``; see :func:`at_ceiling`): from
    there it only climbs along the best's neighbours while one gains.

    A configuration already measured is never measured again, and the study is told each
    measurement once: a repeated proposal is closed as failed (``duplicate_of`` names what it
    repeats), a state TPE leaves out of its model, where a second value would count the same
    measurement twice. One that needs at least the memory of a configuration that ran out is
    skipped unmeasured and told as pruned (a poor result, for TPE) the first time only; so is
    a proposal of the sampler that ``predicted_slow`` judges not worth measuring against the
    best measured so far (queued configurations are always measured).
    When the sampler keeps proposing known or skipped configurations, an untried one is queued
    for it and measured whatever the judge would say (where the judge rules out every proposal,
    judging the queued one too would skip the space one configuration at a time); the search
    ends early only when the space holds no untried feasible configuration.
    """
    fruitless = 0
    ordinal = ordinal_params(study, space)
    reached, reached_at = False, -1
    while state.measured < n_trials:
        if should_stop is not None and should_stop():
            break
        if getattr(study.sampler, "exhausted", False):
            state.exhausted = True
            break
        if ceiling is not None and reached_at != state.measured:
            bounds = ceiling()
            reached = bounds is not None and at_ceiling(state.best, *bounds)
            reached_at = state.measured
        if patience and (state.since_improvement >= patience or reached) and not _queued(study):
            if not _queue_adjacent(study, space, state, out_of_reach, on_skip):
                state.converged, state.at_ceiling = True, reached
                break
            continue
        if fruitless >= FRUITLESS_ASKS_BEFORE_NUDGE:
            untried = _untried_feasible(space, state, seed)
            if untried is None:
                state.exhausted = True
                break
            study.enqueue_trial(
                params_of(space, untried, ordinal), user_attrs={"phase": "search", "nudged": True}
            )
            fruitless = 0
        trial = study.ask()
        config = suggest_config(space, trial, ordinal)
        phase = str(trial.user_attrs.get("phase", "search"))
        nudged = bool(trial.user_attrs.get("nudged"))
        key = config.key()
        if key in state.values or (key in state.skipped_keys and not nudged):
            trial.set_user_attr("duplicate_of", key)
            study.tell(trial, state=TrialState.FAIL)
            fruitless += 1
            continue
        reason = state.infeasible.reason(config)
        slow = None
        if (
            reason is None
            and predicted_slow is not None
            and phase == "search"
            and not nudged
            and state.best_config is not None
        ):
            slow = reason = predicted_slow(config, state.best_config, state.best)
        if reason is not None:
            trial.set_user_attr("skipped", reason)
            study.tell(trial, state=TrialState.PRUNED)
            state.skip(config, predicted_slow=slow is not None)
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
    return state
