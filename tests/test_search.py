"""The search loop on a real in-memory Optuna study with a deterministic fake measurement."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import pytest
from conftest import FAST, WORKLOADS
from optuna.trial import TrialState
from pydantic import ValidationError
from sqlalchemy import Engine, event, select

from autotune.errors import ConfigError
from autotune.search import (
    CeilingFn,
    InfeasibleSet,
    Observation,
    SearchState,
    at_ceiling,
    clearly_slow,
    config_from_params,
    enqueue_candidates,
    enqueue_first_trials,
    fail_interrupted_trials,
    make_sampler,
    open_study,
    ordinal_params,
    params_of,
    run_search,
    study_name_for,
    suggest_config,
)
from autotune.space import Config, DeviceInfo, SearchSpace, WorkloadInfo
from autotune.store import Trial, open_database
from autotune.tuner import CONFIRM_WINDOW_FACTOR, TuneOptions, create_job, load_job, run_job

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")

CPU = DeviceInfo(
    type="cpu", name="test cpu", memory_bytes=16 * 2**30, cpu_count=2, bf16_supported=True
)
IMAGES = WorkloadInfo(name="images", dataset_length=100_000, input_batch_ndim=4, batch_size=32)
TOKENS = WorkloadInfo(name="tokens", dataset_length=100_000, input_batch_ndim=2, batch_size=32)
#: The fake device runs out of memory from this batch size on.
OOM_BATCH = 256


def throughput(config: Config) -> float:
    """Samples/s of the fake device: more workers help, bf16 helps, bigger batches help a bit."""
    value = 100.0 * (1 + config.num_workers) * config.batch_size**0.25
    if config.num_workers:
        value *= 1 + 0.01 * (config.prefetch_factor or 2) + 0.02 * config.persistent_workers
    if config.amp == "bf16":
        value *= 1.3
    if config.channels_last:
        value *= 1.1
    return value


@dataclass
class FakeMeasure:
    """Records every configuration it is asked to measure, with its phase and observation."""

    calls: list[tuple[Config, str, Observation]] = field(default_factory=list)

    def __call__(self, config: Config, phase: str, trial: optuna.Trial) -> Observation:
        assert isinstance(trial, optuna.Trial)
        if config.batch_size >= OOM_BATCH:
            observation = Observation(0.0, out_of_memory=True)
        else:
            observation = Observation(throughput(config))
        self.calls.append((config, phase, observation))
        return observation

    @property
    def keys(self) -> list[str]:
        return [config.key() for config, _, _ in self.calls]


def new_study(
    space: SearchSpace,
    n_trials: int,
    seed: int = 0,
    storage: optuna.storages.BaseStorage | None = None,
) -> optuna.Study:
    return optuna.create_study(
        storage=storage,
        study_name="test-study",
        direction="maximize",
        sampler=make_sampler(space, n_trials, seed),
        pruner=optuna.pruners.NopPruner(),
        load_if_exists=True,
    )


def all_keys(space: SearchSpace) -> set[str]:
    names = list(space.choices)
    return {
        space.config_from(dict(zip(names, combo, strict=True))).key()
        for combo in itertools.product(*(space.choices[n] for n in names))
    }


def search(
    space: SearchSpace, n_trials: int, seed: int = 0
) -> tuple[optuna.Study, SearchState, FakeMeasure, list[tuple[Config, str]]]:
    study = new_study(space, n_trials, seed)
    enqueue_first_trials(study, space)
    state = SearchState(InfeasibleSet())
    measure = FakeMeasure()
    skips: list[tuple[Config, str]] = []
    run_search(
        study,
        space,
        state,
        measure,
        n_trials,
        on_skip=lambda config, reason: skips.append((config, reason)),
    )
    return study, state, measure, skips


# -- the loop --------------------------------------------------------------------------------


def test_baseline_then_checklist_then_search() -> None:
    space = SearchSpace(CPU, IMAGES)
    study, state, measure, _ = search(space, n_trials=8)
    phases = [phase for _, phase, _ in measure.calls]
    assert phases == ["baseline", "checklist"] + ["search"] * 6
    assert measure.calls[0][0] == space.baseline()
    assert measure.calls[1][0] == space.checklist()
    trials = study.get_trials(deepcopy=False)
    assert trials[0].user_attrs["phase"] == "baseline"
    assert trials[1].user_attrs["phase"] == "checklist"
    assert trials[0].value == pytest.approx(throughput(space.baseline()))


def test_enqueue_first_trials_only_for_a_new_study() -> None:
    space = SearchSpace(CPU, IMAGES)
    study = new_study(space, 10)
    enqueue_first_trials(study, space)
    enqueue_first_trials(study, space)
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert [t.user_attrs["phase"] for t in waiting] == ["baseline", "checklist"]


def test_measures_exactly_n_trials_never_twice() -> None:
    space = SearchSpace(CPU, IMAGES)
    assert space.size() > 30
    study, state, measure, _ = search(space, n_trials=30)
    assert len(measure.calls) == state.measured == 30
    assert len(set(measure.keys)) == 30
    assert set(state.values) == set(measure.keys)
    assert not state.exhausted
    for config, _, observation in measure.calls:
        assert space.contains(config)
        assert state.values[config.key()] == observation.value


def small_space() -> SearchSpace:
    # 2 batches x (no workers + 2 worker counts x 2 persistence) = 10 configurations.
    space = SearchSpace(
        CPU,
        TOKENS,
        fixed={"amp": "off", "prefetch_factor": 2, "intra_op_threads": None},
        ranges={"batch_size": "16,32", "num_workers": "0,2,4"},
    )
    assert space.size() == 10
    return space


def test_a_duplicate_is_closed_as_failed_and_each_measurement_is_told_once() -> None:
    space = small_space()
    study, state, measure, _ = search(space, n_trials=9)
    assert isinstance(study.sampler, optuna.samplers.TPESampler)
    assert len(measure.calls) == len(set(measure.keys)) == state.measured
    trials = study.get_trials(deepcopy=False)
    duplicates = [t for t in trials if "duplicate_of" in t.user_attrs]
    assert duplicates, "the sampler never proposed a configuration twice; the test proves nothing"
    for trial in duplicates:
        key = config_from_params(space, trial.params).key()
        assert trial.user_attrs["duplicate_of"] == key
        assert key in state.values
        # FAIL, not PRUNED: TPE reads COMPLETE and PRUNED trials only (a pruned one as a poor
        # result), so a repeated proposal adds nothing to its model.
        assert trial.state == TrialState.FAIL and trial.value is None
    # Every measured configuration is one COMPLETE value in the study, that measurement's.
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    told = [config_from_params(space, t.params).key() for t in complete]
    assert sorted(told) == sorted(measure.keys)
    for trial in complete:
        assert trial.value == state.values[config_from_params(space, trial.params).key()]


def test_an_infeasible_configuration_is_told_as_pruned_once() -> None:
    space = SearchSpace(
        CPU,
        TOKENS,
        fixed={
            "amp": "off",
            "prefetch_factor": 2,
            "persistent_workers": False,
            "intra_op_threads": None,
        },
        ranges={"batch_size": "128,256,512", "num_workers": "0,2"},
    )
    study = new_study(space, 5)
    state = SearchState(InfeasibleSet())
    state.infeasible.add(Config(batch_size=256))
    run_search(study, space, state, FakeMeasure(), 3)  # 3 of 6 configurations are ruled out
    skipped = [t for t in study.get_trials(deepcopy=False) if "skipped" in t.user_attrs]
    keys = [config_from_params(space, t.params).key() for t in skipped]
    assert keys and len(keys) == len(set(keys)) == state.skipped
    assert all(t.state == TrialState.PRUNED for t in skipped)
    repeats = [
        t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("duplicate_of") in set(keys)
    ]
    assert all(t.state == TrialState.FAIL for t in repeats)


def test_a_proposal_predicted_far_slower_than_the_best_is_skipped_unmeasured() -> None:
    # The judge rules out every configuration without workers once a measurement exists: the
    # queued baseline and checklist are measured whatever it says; the sampler's proposals it
    # rules out are told as pruned once, never measured, and counted apart from infeasible ones.
    space = SearchSpace(
        CPU,
        TOKENS,
        fixed={
            "amp": "off",
            "prefetch_factor": 2,
            "persistent_workers": False,
            "intra_op_threads": None,
        },
        ranges={"batch_size": "32,64,128", "num_workers": "0,2,4"},
    )
    study = new_study(space, 12)
    enqueue_first_trials(study, space)
    study.enqueue_trial(
        params_of(space, Config(batch_size=128), ordinal_params(study, space)),
        user_attrs={"phase": "predicted"},
    )
    state = SearchState(InfeasibleSet())
    measure = FakeMeasure()
    judged: list[float] = []

    def without_workers_too_slow(config: Config, best_config: Config, best: float) -> str | None:
        judged.append(best)
        assert throughput(best_config) == best
        return "predicted too slow" if config.num_workers == 0 else None

    run_search(study, space, state, measure, 8, predicted_slow=without_workers_too_slow)
    phases = {config.key(): phase for config, phase, _ in measure.calls}
    assert phases[space.baseline().key()] == "baseline" and space.baseline().num_workers == 0
    assert phases[Config(batch_size=128).key()] == "predicted"  # queued: measured anyway
    searched = [config for config, phase, _ in measure.calls if phase == "search"]
    assert searched and all(config.num_workers > 0 for config in searched)
    skipped = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.user_attrs.get("skipped") == "predicted too slow"
    ]
    assert skipped and all(t.state == TrialState.PRUNED for t in skipped)
    keys = [config_from_params(space, t.params).key() for t in skipped]
    assert len(keys) == len(set(keys)) == state.skipped_slow and state.skipped == 0
    assert not set(keys) & set(measure.keys)
    # Judged against the best complete measurement at the time, never before there is one.
    assert judged and all(0 < best <= state.best for best in judged)


def test_a_judge_that_rules_out_every_proposal_still_leaves_the_budget_measured() -> None:
    """A profile that read a tiny workload three times too slow predicted every configuration
    under a third of the best measured: each configuration queued for the stuck sampler was
    judged and skipped in turn, and the job asked Optuna 16,740 times in 10 minutes. The
    configuration queued for the sampler is measured whatever the judge says."""
    space = SearchSpace(
        CPU,
        TOKENS,
        fixed={
            "amp": "off",
            "prefetch_factor": 2,
            "persistent_workers": False,
            "intra_op_threads": None,
        },
        ranges={"batch_size": "32,64,128", "num_workers": "0,2,4"},
    )
    study = new_study(space, 6)  # TPE: the space holds more than the budget
    enqueue_first_trials(study, space)
    state = SearchState(InfeasibleSet())
    measure = FakeMeasure()
    run_search(
        study,
        space,
        state,
        measure,
        6,
        predicted_slow=lambda config, best_config, best: "predicted too slow",
    )
    assert state.measured == 6 and not state.exhausted
    nudged = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("nudged")]
    measured_keys = set(measure.keys)
    assert nudged and all(
        config_from_params(space, t.params).key() in measured_keys for t in nudged
    )
    assert len(study.get_trials(deepcopy=False)) < 6 * 25


def test_a_space_just_larger_than_the_budget_gets_the_whole_budget() -> None:
    # TPE proposes the same few configurations again and again; the search must still find
    # the unmeasured ones rather than give up with trials left and the space not exhausted.
    space = small_space()
    _, state, measure, _ = search(space, n_trials=9)
    assert len(set(measure.keys)) == state.measured == 9
    assert not state.exhausted


def test_configurations_that_need_more_memory_than_an_oom_are_skipped() -> None:
    space = SearchSpace(
        CPU,
        IMAGES,
        ranges={"batch_size": "64..512", "num_workers": "0,2"},
        fixed={"channels_last": False, "persistent_workers": False},
    )
    study, state, measure, skips = search(space, n_trials=30)
    assert len(measure.calls) == state.measured == 30
    failures = [config for config, _, observation in measure.calls if observation.out_of_memory]
    assert failures
    assert state.skipped == len(skips) > 0
    for config, reason in skips:
        assert "ran out of memory" in reason
        # The fake device fails from OOM_BATCH on: a skipped configuration must be one of those.
        assert config.batch_size >= OOM_BATCH
    skipped_trials = [t for t in study.get_trials(deepcopy=False) if "skipped" in t.user_attrs]
    assert len(skipped_trials) == state.skipped
    assert all(t.state == TrialState.PRUNED for t in skipped_trials)


def test_oom_with_another_precision_or_layout_does_not_rule_out() -> None:
    infeasible = InfeasibleSet()
    infeasible.add(Config(batch_size=256, amp="off"))
    assert infeasible.reason(Config(batch_size=512, amp="bf16")) is None
    assert infeasible.reason(Config(batch_size=512, channels_last=True)) is None
    assert infeasible.reason(Config(batch_size=128, amp="off")) is None
    assert infeasible.reason(Config(batch_size=256, amp="off", num_workers=8)) is not None
    assert "batch_size=256 with num_workers=0 and amp=off" in (
        infeasible.reason(Config(batch_size=512)) or ""
    )


def test_fewer_batches_in_flight_is_measured_even_with_a_larger_batch() -> None:
    infeasible = InfeasibleSet()
    infeasible.add(Config(batch_size=256, num_workers=4, prefetch_factor=4))
    assert infeasible.reason(Config(batch_size=512, num_workers=2, prefetch_factor=4)) is None
    assert infeasible.reason(Config(batch_size=512, num_workers=4, prefetch_factor=2)) is None
    assert infeasible.reason(Config(batch_size=512, num_workers=4)) is None  # default is 2
    assert infeasible.reason(Config(batch_size=256, num_workers=4, prefetch_factor=4)) is not None


def test_cancelled_measurement_stops_the_search() -> None:
    space = SearchSpace(CPU, IMAGES)
    study = new_study(space, 10)
    enqueue_first_trials(study, space)
    state = SearchState(InfeasibleSet())
    calls: list[Config] = []

    def measure(config: Config, phase: str, trial: optuna.Trial) -> Observation:
        calls.append(config)
        return Observation(0.0, cancelled=len(calls) == 3)

    run_search(study, space, state, measure, 10)
    assert len(calls) == 3
    assert state.measured == 2
    assert calls[2].key() not in state.values
    assert study.get_trials(deepcopy=False)[-1].state == TrialState.FAIL


def test_should_stop_ends_the_search() -> None:
    space = SearchSpace(CPU, IMAGES)
    study = new_study(space, 10)
    state = SearchState(InfeasibleSet())
    measure = FakeMeasure()
    run_search(study, space, state, measure, 10, should_stop=lambda: len(measure.calls) >= 4)
    assert state.measured == len(measure.calls) == 4


# -- exhaustive search -----------------------------------------------------------------------


@dataclass
class PlateauMeasure(FakeMeasure):
    """A landscape where only ``peak`` is fast; everything else reads within 1% of 100."""

    peak: Config | None = None

    def __call__(self, config: Config, phase: str, trial: optuna.Trial) -> Observation:
        value = 200.0 if config == self.peak else 100.0 + len(self.calls) % 2
        self.calls.append((config, phase, Observation(value)))
        return Observation(value)


def test_patience_ends_a_converged_search_after_the_queued_configurations() -> None:
    space = SearchSpace(CPU, IMAGES, ranges={"batch_size": "32..128", "num_workers": "0,1,2,4"})
    peak = Config(batch_size=64, num_workers=4, prefetch_factor=4)
    study = new_study(space, 30)
    enqueue_first_trials(study, space)  # the baseline and the checklist
    state = SearchState(InfeasibleSet())
    enqueue_candidates(
        study, space, [Config(batch_size=32, num_workers=1), peak], "predicted", state
    )
    measure = PlateauMeasure(peak=peak)
    run_search(study, space, state, measure, 30, patience=5)
    # The four queued ones first (the peak last of them), then five that gained nothing, then
    # the peak's adjacent configurations not measured by then, and nothing more.
    calls = [c for c, _, _ in measure.calls]
    assert calls[3] == peak
    adjacent = {c.key() for c in space.adjacent(peak)}
    assert adjacent <= set(state.values)
    assert state.measured == 9 + len(adjacent - {c.key() for c in calls[:9]})
    assert state.converged
    assert state.end_reason(30) == "converged"

    # Without patience the same search measures its whole budget.
    study = new_study(space, 30, seed=1)
    enqueue_first_trials(study, space)
    state = SearchState(InfeasibleSet())
    run_search(study, space, state, PlateauMeasure(peak=peak), 12)
    assert state.measured == 12 and not state.converged and state.end_reason(12) == "budget"


def _as_read(ceiling: float) -> CeilingFn:
    """A profile's ceiling with no trial to scale it: the same either way."""
    return lambda: (ceiling, ceiling, ceiling)


def _plateau_search(
    ceiling: CeilingFn | None, peak: Config, measure: PlateauMeasure, **options: Any
) -> tuple[SearchState, SearchSpace]:
    """The patience test's search (baseline, checklist, two seeds with the peak last), with a
    profile's ceiling and ``options`` for :func:`run_search`."""
    space = SearchSpace(CPU, IMAGES, ranges={"batch_size": "32..128", "num_workers": "0,1,2,4"})
    study = new_study(space, 30)
    enqueue_first_trials(study, space)
    state = SearchState(InfeasibleSet())
    enqueue_candidates(
        study, space, [Config(batch_size=32, num_workers=1), peak], "predicted", state
    )
    run_search(study, space, state, measure, 30, patience=5, ceiling=ceiling, **options)
    return state, space


def test_a_best_at_the_profile_s_ceiling_ends_the_search_after_its_neighbours() -> None:
    peak = Config(batch_size=64, num_workers=4, prefetch_factor=4)
    # The peak measures 200 where the profile's fastest prediction is 205: within 5%.
    measure = PlateauMeasure(peak=peak)
    state, space = _plateau_search(_as_read(205.0), peak, measure)
    calls = [c for c, _, _ in measure.calls]
    adjacent = {c.key() for c in space.adjacent(peak)} - {c.key() for c in calls[:4]}
    # The four queued ones (the peak last), then only the peak's neighbours: the sampler gets
    # no turn, where patience alone waits out five measurements first.
    assert calls[3] == peak
    assert {c.key() for c in calls[4:]} == adjacent
    assert state.measured == 4 + len(adjacent)
    assert state.converged and state.at_ceiling and state.end_reason(30) == "ceiling"

    # Short of the ceiling (200 against a predicted 220), patience decides, as without one.
    measure = PlateauMeasure(peak=peak)
    state, _ = _plateau_search(_as_read(220.0), peak, measure)
    patient = 9 + len(adjacent - {c.key() for c, _, _ in measure.calls[:9]})
    assert state.measured == patient
    assert state.converged and not state.at_ceiling and state.end_reason(30) == "converged"

    # The same, but the trials ran at about 0.93 of the profile from the fourth measurement on
    # (the ceiling is asked again after each): 200 is within 5% of the 205 so scaled, and the
    # search ends at the ceiling as in the first case.
    measure = PlateauMeasure(peak=peak)

    def scaled() -> tuple[float, float, float]:
        return (220.0, 205.0, 220.0) if len(measure.calls) >= 4 else (220.0, 220.0, 220.0)

    state, _ = _plateau_search(scaled, peak, measure)
    assert state.measured == 4 + len(adjacent)
    assert state.converged and state.at_ceiling and state.end_reason(30) == "ceiling"

    # Far above it (200 against a predicted 100: a knob the profile does not time, as TF32 or
    # torch.compile on a GPU), the profile mispredicts the top of the space: patience decides.
    measure = PlateauMeasure(peak=peak)
    state, _ = _plateau_search(_as_read(100.0), peak, measure)
    assert state.measured == patient
    assert state.converged and not state.at_ceiling and state.end_reason(30) == "converged"


def test_a_neighbour_the_profile_puts_out_of_reach_is_skipped_not_measured() -> None:
    # As above at the ceiling, with a profile that rules out every neighbour with fewer
    # workers than the peak (slow-storage's batch 256 with 4 workers next to 8, predicted at
    # half of it): the others are measured, those are counted as skipped, and the search still
    # ends at the ceiling.
    peak = Config(batch_size=64, num_workers=4, prefetch_factor=4)
    judged: list[tuple[Config, Config, float]] = []

    def fewer_workers(config: Config, best_config: Config, best: float) -> str | None:
        judged.append((config, best_config, best))
        return "fewer workers" if config.num_workers < best_config.num_workers else None

    skipped: list[tuple[Config, str]] = []
    measure = PlateauMeasure(peak=peak)
    state, space = _plateau_search(
        _as_read(205.0),
        peak,
        measure,
        out_of_reach=fewer_workers,
        on_skip=lambda c, r: skipped.append((c, r)),
    )
    measured = {c.key() for c, _, _ in measure.calls}
    neighbours = {c.key(): c for c in space.adjacent(peak)}
    out = {key for key, c in neighbours.items() if c.num_workers < peak.num_workers}
    assert out and out.isdisjoint(measured)
    assert set(neighbours) - out <= measured
    assert {c.key() for c, _ in skipped} == out - measured and state.skipped_slow == len(out)
    assert all(best_config == peak and best == 200.0 for _, best_config, best in judged)
    assert state.converged and state.at_ceiling and state.end_reason(30) == "ceiling"


def test_at_the_ceiling_a_neighbour_that_gains_keeps_the_search_climbing() -> None:
    # The profile foresees 101 at most, and the seed reads 100; its next batch gains 5.5%, more
    # than a trial's spread and still within 5% of the ceiling: the climb measures that
    # batch's neighbour too, which gains nothing, and the search ends there.
    space = SearchSpace(
        CPU, IMAGES, fixed={"amp": "off", "num_workers": 0}, ranges={"batch_size": "16..128"}
    )

    def rising(config: Config, phase: str, trial: optuna.Trial) -> Observation:
        return Observation(100.0 if config.batch_size == 16 else 105.5)

    study = new_study(space, 100, seed=3)
    state = SearchState(InfeasibleSet())
    enqueue_candidates(study, space, [Config(batch_size=16)], "predicted", state)
    run_search(study, space, state, rising, 100, patience=6, ceiling=_as_read(101.0))
    assert state.best_config == Config(batch_size=24)
    assert state.at_ceiling and state.end_reason(100) == "ceiling"
    assert set(state.values) == {Config(batch_size=b).key() for b in (16, 24, 32)}
    assert at_ceiling(96.0, 101.0) and at_ceiling(106.3, 101.0)
    assert not at_ceiling(95.9, 101.0) and not at_ceiling(106.4, 101.0)
    assert not at_ceiling(100.0, None)
    # With the ceiling as the trials scale it, anywhere between the two counts, and the noise
    # beyond either: the profile read 101 and its trials ran at 0.8 of it.
    assert at_ceiling(77.0, 101.0, 80.8) and at_ceiling(90.0, 101.0, 80.8)
    assert at_ceiling(106.3, 101.0, 80.8) and at_ceiling(106.3, 80.8, 101.0)
    assert not at_ceiling(76.7, 101.0, 80.8) and not at_ceiling(106.4, 101.0, 80.8)
    # A best up to the noise over the highest scale another trial ran at is one of them, not a
    # breakthrough (the image-cnn job whose eleventh trial read 1.085 of the profile, its
    # others up to 1.04); the highest scale widens the band upwards only.
    assert at_ceiling(108.5, 100.0, 99.0, 104.0) and not at_ceiling(108.5, 100.0, 99.0)
    assert not at_ceiling(109.5, 100.0, 99.0, 104.0)
    assert not at_ceiling(94.0, 100.0, 99.0, 90.0)


def test_a_neighbour_faster_within_the_noise_starts_no_further_climb() -> None:
    # Every larger batch reads 1% faster: within a trial's spread. The search climbs from the
    # seed's neighbours once, and not on from the neighbour that read 1% above it.
    space = SearchSpace(
        CPU, IMAGES, fixed={"amp": "off", "num_workers": 0}, ranges={"batch_size": "16..128"}
    )

    def creeping(config: Config, phase: str, trial: optuna.Trial) -> Observation:
        return Observation(100.0 * 1.01 ** space.choices["batch_size"].index(config.batch_size))

    seed = Config(batch_size=48)
    study = new_study(space, 100, seed=3)
    state = SearchState(InfeasibleSet())
    enqueue_candidates(study, space, [seed], "predicted", state)
    run_search(study, space, state, creeping, 100, patience=6, ceiling=_as_read(100.0))
    assert state.at_ceiling and state.end_reason(100) == "ceiling"
    assert state.refined == {seed.key()}
    assert set(state.values) == {seed.key(), *(c.key() for c in space.adjacent(seed))}


def test_before_converging_the_search_climbs_along_the_best_s_adjacent_configurations() -> None:
    # Faster with every larger batch and every extra worker: where the sampler gives up after
    # one proposal that gains nothing, the best's neighbours keep climbing to the corner.
    space = SearchSpace(
        CPU,
        IMAGES,
        fixed={"amp": "off", "prefetch_factor": 2},
        ranges={"batch_size": "16..128", "num_workers": "0,1,2,4,6,8"},
    )

    def climbing(config: Config, phase: str, trial: optuna.Trial) -> Observation:
        return Observation(float(config.batch_size * (1 + config.num_workers)))

    study = new_study(space, 100, seed=3)
    state = SearchState(InfeasibleSet())
    enqueue_candidates(study, space, [Config(batch_size=16)], "baseline", state)
    run_search(study, space, state, climbing, 100, patience=1)
    assert state.converged
    assert state.best_config is not None
    assert (state.best_config.batch_size, state.best_config.num_workers) == (128, 8)
    assert state.measured < len(all_keys(space)) / 2


def test_adjacent_configurations_step_one_value_along_each_ordered_knob() -> None:
    space = SearchSpace(
        CPU,
        IMAGES,
        fixed={"amp": "off"},
        ranges={"batch_size": "32..128", "num_workers": "0,2,4", "prefetch_factor": "1,2,4"},
    )
    batches = space.choices["batch_size"]
    middle = batches[len(batches) // 2]
    config = Config(batch_size=middle, num_workers=2, prefetch_factor=2)
    near = {(c.batch_size, c.num_workers, c.prefetch_factor) for c in space.adjacent(config)}
    below, above = batches[batches.index(middle) - 1], batches[batches.index(middle) + 1]
    assert near == {
        (below, 2, 2),
        (above, 2, 2),
        (middle, 0, None),
        (middle, 4, 2),
        (middle, 2, 1),
        (middle, 2, 4),
    }
    # Without workers a prefetch factor has no effect: no neighbour along it.
    alone = {(c.batch_size, c.num_workers) for c in space.adjacent(Config(batch_size=32))}
    assert alone == {(batches[1], 0), (32, 2)}


def test_patience_waits_for_every_queued_configuration_and_counts_gains_above_noise() -> None:
    space = SearchSpace(CPU, IMAGES, ranges={"batch_size": "32..128", "num_workers": "0,1,2,4"})
    study = new_study(space, 30)
    queued = [Config(batch_size=b, num_workers=w) for b in (32, 64, 128) for w in (1, 2)]
    state = SearchState(InfeasibleSet())
    enqueue_candidates(study, space, queued, "predicted", state)
    measure = PlateauMeasure()
    run_search(study, space, state, measure, 30, patience=2)
    # Six queued configurations are all measured although two were enough to converge.
    assert [c for c, _, _ in measure.calls][:6] == [c.normalized() for c in queued]
    assert state.best_config is not None
    adjacent = {c.key() for c in space.adjacent(state.best_config)}
    assert state.measured == 6 + len(adjacent - {c.key() for c in queued})
    assert state.converged

    # A gain of 1% is noise; one of 10% starts the count again.
    state = SearchState(InfeasibleSet())
    for value in (100.0, 101.0, 110.0, 111.0):
        state.remember(Config(batch_size=int(value)), Observation(value))
    assert state.best == 111.0 and state.since_improvement == 1


def test_make_sampler_brute_force_only_when_the_space_fits() -> None:
    space = SearchSpace(
        CPU,
        TOKENS,
        fixed={"amp": "off", "intra_op_threads": None},
        ranges={"batch_size": "16,32", "num_workers": "0,2"},
    )
    size = space.size()
    assert size == 2 * (1 + 5 * 2)
    assert isinstance(make_sampler(space, size, 0), optuna.samplers.BruteForceSampler)
    assert isinstance(make_sampler(space, size + 1, 0), optuna.samplers.BruteForceSampler)
    assert isinstance(make_sampler(space, size - 1, 0), optuna.samplers.TPESampler)


@pytest.mark.parametrize("extra", [0, 10])
def test_brute_force_search_ends_by_exhaustion_without_duplicates(extra: int) -> None:
    space = SearchSpace(
        CPU,
        TOKENS,
        fixed={"amp": "off", "prefetch_factor": 2, "intra_op_threads": None},
        ranges={"batch_size": "128,256,384", "num_workers": "0,2"},
    )
    expected = all_keys(space)
    assert space.size() == len(expected) == 3 * (1 + 2)
    n_trials = space.size() + extra
    study, state, measure, skips = search(space, n_trials=n_trials)
    assert isinstance(study.sampler, optuna.samplers.BruteForceSampler)
    assert len(measure.keys) == len(set(measure.keys)) == state.measured
    seen = set(measure.keys) | {config.key() for config, _ in skips}
    assert seen == expected
    assert state.measured + state.skipped >= len(expected)
    assert state.measured < n_trials
    assert state.exhausted


# -- ordered knobs ---------------------------------------------------------------------------


def test_ordered_knobs_are_asked_as_integer_indices() -> None:
    space = SearchSpace(CPU, IMAGES)
    study, _, measure, _ = search(space, n_trials=12)
    assert ordinal_params(study)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        for name in ("batch_size", "num_workers"):
            distribution = trial.distributions[f"{name}_index"]
            assert isinstance(distribution, optuna.distributions.IntDistribution)
            assert (distribution.low, distribution.high) == (0, len(space.choices[name]) - 1)
            assert name not in trial.params
        assert isinstance(trial.distributions["amp"], optuna.distributions.CategoricalDistribution)
        if trial.params["num_workers_index"] > 0:
            assert "prefetch_factor_index" in trial.params
        else:
            assert "prefetch_factor_index" not in trial.params
    assert len(measure.calls) == 12


# -- queued configurations -------------------------------------------------------------------


def test_enqueue_candidates_skips_known_outside_and_infeasible() -> None:
    space = SearchSpace(CPU, IMAGES, ranges={"batch_size": "64..512", "num_workers": "0,2,4"})
    study = new_study(space, 20)
    enqueue_first_trials(study, space)
    state = SearchState(InfeasibleSet())
    state.infeasible.add(Config(batch_size=256))
    state.values[Config(batch_size=64, num_workers=4).key()] = 1.0  # measured outside Optuna
    wanted = Config(batch_size=128, num_workers=4, prefetch_factor=4, amp="bf16")
    candidates = [
        wanted,
        wanted,  # twice in the list
        space.checklist(),  # already waiting
        Config(batch_size=64, num_workers=4),  # already measured
        Config(batch_size=512, num_workers=4),  # needs more memory than an OOM
        Config(batch_size=128, num_workers=3),  # not in the space
        Config(batch_size=96, num_workers=2, persistent_workers=True),
    ]
    queued = enqueue_candidates(study, space, candidates, "predicted", state)
    assert queued == [
        wanted,
        Config(batch_size=96, num_workers=2, persistent_workers=True, prefetch_factor=2),
    ]
    # Queued again, as a resumed job would: nothing is added.
    assert enqueue_candidates(study, space, candidates, "predicted", state) == []
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    # The baseline (batch 32) lies off this grid: it is measured apart, never queued.
    assert [t.user_attrs["phase"] for t in waiting] == ["checklist", "predicted", "predicted"]

    # They are measured next, in order, as themselves; once measured they are not queued again.
    measure = FakeMeasure()
    run_search(study, space, state, measure, state.measured + 3)
    assert [c for c, _, _ in measure.calls] == [space.checklist(), *queued]
    assert [phase for _, phase, _ in measure.calls[1:]] == ["predicted", "predicted"]
    assert enqueue_candidates(study, space, queued, "predicted", state) == []
    assert enqueue_candidates(study, space, queued, "predicted") == []  # the study alone knows


def test_a_space_holding_prefetch_at_pytorchs_default_queues_the_predicted_and_the_checklist() -> (
    None
):
    # `--fix prefetch_factor=null`, as the benchmarks' reduced spaces hold it: with workers,
    # unset is PyTorch's 2, so a configuration with workers is in the space whichever it says.
    space = SearchSpace(
        CPU,
        TOKENS,
        fixed={"prefetch_factor": None},
        ranges={"batch_size": "32,64", "num_workers": "0,2,8"},
    )
    study = new_study(space, 10)
    enqueue_first_trials(study, space)
    predicted = [
        Config(batch_size=32, num_workers=8),
        Config(batch_size=64, num_workers=8, prefetch_factor=2),
    ]
    queued = [config.normalized() for config in predicted]
    assert enqueue_candidates(study, space, predicted, "predicted") == queued
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert [t.user_attrs["phase"] for t in waiting] == [
        "baseline",
        "checklist",
        "predicted",
        "predicted",
    ]
    measure = FakeMeasure()
    run_search(study, space, SearchState(InfeasibleSet()), measure, 4)
    assert [c for c, _, _ in measure.calls] == [space.baseline(), space.checklist(), *queued]


def test_enqueue_candidates_on_a_resumed_study_queues_nothing_twice(tmp_path: Path) -> None:
    space = SearchSpace(CPU, IMAGES, ranges={"batch_size": "64..512"})
    url = f"sqlite:///{tmp_path / 'study.db'}"
    prior = [
        Config(batch_size=192, num_workers=6, prefetch_factor=2, amp="bf16"),
        Config(batch_size=384),
    ]
    study = open_study(url, 1, space, 20, 0)
    enqueue_first_trials(study, space)
    assert enqueue_candidates(study, space, prior, "predicted") == prior
    measure = FakeMeasure()
    run_search(study, space, SearchState(InfeasibleSet()), measure, 2)  # checklist, prior[0]
    study = open_study(url, 1, space, 20, 0)  # a new process resumes the job
    assert enqueue_candidates(study, space, prior, "predicted") == []
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    assert [config_from_params(space, t.system_attrs["fixed_params"]) for t in waiting] == [
        prior[1]
    ]


def test_a_study_resumed_with_other_knob_values_is_refused(tmp_path: Path) -> None:
    # Its indices would name other values: batch_size_index 2 meant 256 and would mean 192.
    url = f"sqlite:///{tmp_path / 'study.db'}"
    space = SearchSpace(CPU, IMAGES, ranges={"batch_size": "64,128,256"})
    run_search(
        open_study(url, 1, space, 20, 0), space, SearchState(InfeasibleSet()), FakeMeasure(), 2
    )
    assert ordinal_params(open_study(url, 1, space, 20, 0))  # the same space resumes
    other = SearchSpace(CPU, IMAGES, ranges={"batch_size": "64,128,192,256"})
    with pytest.raises(
        ConfigError,
        match=r"search space changed since this study started "
        r"\(values of batch_size\).*submit a new job",
    ):
        open_study(url, 1, other, 20, 0)


# -- studies created before ordered knobs ---------------------------------------------------


def suggest_categorical(space: SearchSpace, trial: optuna.trial.BaseTrial) -> Config:
    """How configurations were asked before ordered knobs: every knob a category."""
    values: dict[str, Any] = {}
    for name, choices in space.searched.items():
        if name not in ("prefetch_factor", "persistent_workers"):
            values[name] = trial.suggest_categorical(name, list(choices))
    if values.get("num_workers", space.choices["num_workers"][0]) > 0:
        for name in ("prefetch_factor", "persistent_workers"):
            if name in space.searched:
                values[name] = trial.suggest_categorical(name, list(space.searched[name]))
    return space.config_from(values)


def old_study(
    space: SearchSpace, url: str, n_trials: int, measured: int
) -> tuple[SearchState, list[str]]:
    """A study as the earlier code left it: measured trials, one running, categorical params."""
    study = optuna.create_study(
        storage=url,
        study_name=study_name_for(1),
        direction="maximize",
        sampler=make_sampler(space, n_trials, 0),
    )
    baseline = space.baseline()
    study.enqueue_trial(
        {
            "batch_size": baseline.batch_size,
            "num_workers": 0,
            "amp": baseline.amp,
            "channels_last": baseline.channels_last,
        },
        user_attrs={"phase": "baseline"},
    )
    state = SearchState(InfeasibleSet())
    for _ in range(measured):
        trial = study.ask()
        config = suggest_categorical(space, trial)
        if config.key() in state.values:
            study.tell(trial, state.values[config.key()])  # what the earlier code told
            continue
        state.values[config.key()] = throughput(config)
        state.measured += 1
        study.tell(trial, state.values[config.key()])
    interrupted = suggest_categorical(space, study.ask())  # left running by a dead process
    return state, [*state.values, interrupted.key()]


@pytest.mark.slow
@pytest.mark.parametrize("n_trials", [10, 1000])  # TPE, then exhaustive
def test_a_study_created_with_categorical_params_resumes(tmp_path: Path, n_trials: int) -> None:
    space = SearchSpace(
        CPU, TOKENS, fixed={"amp": "off"}, ranges={"batch_size": "16,32,64", "num_workers": "0,2"}
    )
    url = f"sqlite:///{tmp_path / 'study.db'}"
    state, seen = old_study(space, url, n_trials, measured=4)
    interrupted = seen[-1]

    study = open_study(url, 1, space, n_trials, 0)
    assert not ordinal_params(study)  # it keeps the parameters its trials have
    stale = fail_interrupted_trials(study)
    assert [config_from_params(space, t.params).key() for t in stale] == [interrupted]
    retried = interrupted not in state.values
    if retried:  # as the job does
        study.enqueue_trial(stale[0].params, user_attrs={"phase": "search"})
    assert enqueue_candidates(
        study, space, [Config(batch_size=64, num_workers=2)], "predicted", state
    ) in ([], [Config(batch_size=64, num_workers=2, prefetch_factor=2)])
    measure = FakeMeasure()
    run_search(study, space, state, measure, n_trials)
    assert measure.keys[0] == interrupted or not retried
    assert not set(measure.keys) & set(seen[:-1]), "a configuration was measured twice"
    assert len(set(measure.keys)) == len(measure.keys)
    assert all(space.contains(c) for c, _, _ in measure.calls)
    for trial in study.get_trials(deepcopy=False):
        assert not any(name.endswith("_index") for name in trial.params)
    if n_trials >= space.size():
        assert state.exhausted
        assert set(state.values) == {c.key() for c in space.all_configs()}


# -- resuming --------------------------------------------------------------------------------


def test_resume_continues_without_measuring_again() -> None:
    space = SearchSpace(CPU, IMAGES, ranges={"batch_size": "64..512"})
    storage = optuna.storages.InMemoryStorage()
    first = FakeMeasure()
    study = new_study(space, 20, storage=storage)
    enqueue_first_trials(study, space)
    run_search(study, space, SearchState(InfeasibleSet()), first, 10)
    assert len(first.calls) == 10

    # A new process: the study is loaded again and the state rebuilt from what was stored.
    state = SearchState(InfeasibleSet())
    for config, _, observation in first.calls:
        state.values[config.key()] = observation.value
        state.measured += 1
        if observation.out_of_memory:
            state.infeasible.add(config)
    study = new_study(space, 20, storage=storage)
    enqueue_first_trials(study, space)
    assert not study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    second = FakeMeasure()
    run_search(study, space, state, second, 20)

    assert len(second.calls) == 10
    assert state.measured == 20
    assert {phase for _, phase, _ in second.calls} == {"search"}
    assert not set(first.keys) & set(second.keys)
    assert len(set(second.keys)) == 10
    known_before = InfeasibleSet()
    for config, _, observation in first.calls:
        if observation.out_of_memory:
            known_before.add(config)
    for config, _, _ in second.calls:
        assert known_before.reason(config) is None, f"measured {config}, ruled out on resume"

    # Resuming a finished search measures nothing.
    third = FakeMeasure()
    run_search(new_study(space, 20, storage=storage), space, state, third, 20)
    assert third.calls == []


def test_fail_interrupted_trials_closes_running_ones() -> None:
    space = SearchSpace(CPU, IMAGES)
    study = new_study(space, 10)
    enqueue_first_trials(study, space)
    run_search(study, space, SearchState(InfeasibleSet()), FakeMeasure(), 2)
    running = study.ask()
    suggest_config(space, running)
    assert [t.number for t in study.get_trials(states=(TrialState.RUNNING,))] == [running.number]

    stale = fail_interrupted_trials(study)
    assert [t.number for t in stale] == [running.number]
    assert stale[0].params == running.params
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert states == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.FAIL]
    assert fail_interrupted_trials(study) == []


# -- pruning ---------------------------------------------------------------------------------


def test_clearly_slow_prunes_only_below_ratio_of_best() -> None:
    finished = [100.0, 80.0, 60.0]
    assert clearly_slow([90.0, 49.0], finished)
    assert not clearly_slow([90.0, 50.0], finished)
    assert not clearly_slow([10.0, 60.0], finished)
    # Only the latest report counts.
    assert clearly_slow([60.0, 10.0], finished)


def test_clearly_slow_waits_for_min_completed_and_min_reports() -> None:
    assert not clearly_slow([1.0, 1.0], [100.0, 80.0])
    assert clearly_slow([1.0, 1.0], [100.0, 80.0, 60.0])
    assert not clearly_slow([], [100.0, 80.0, 60.0])
    assert not clearly_slow([1.0], [100.0, 80.0, 60.0])


def test_the_job_study_has_no_pruner(tmp_path: Path) -> None:
    # Pruning is decided in memory while a trial runs (nothing reads the storage during a
    # timed window); a pruner on the study would never be asked, so there is none.
    space = SearchSpace(CPU, IMAGES)
    study = open_study(f"sqlite:///{tmp_path / 'study.db'}", 1, space, 10, 0)
    assert isinstance(study.pruner, optuna.pruners.NopPruner)


# -- short windows screen, longer windows decide ---------------------------------------------


def test_confirm_plan_is_longer_than_the_search_plan() -> None:
    options = TuneOptions(workload="builtin:image-cnn", min_seconds=2.0, min_steps=5)
    search_plan, confirm_plan = options.measure_plan(), options.confirm_plan()
    assert confirm_plan.min_seconds == CONFIRM_WINDOW_FACTOR * search_plan.min_seconds
    # Longer in time, not in steps: thirty steps of a slow step would last minutes.
    assert confirm_plan.min_steps == search_plan.min_steps
    assert confirm_plan.warmup_steps == search_plan.warmup_steps
    assert confirm_plan.seed == search_plan.seed
    chosen = TuneOptions(workload="builtin:image-cnn", min_seconds=2.0, confirm_seconds=10.0)
    assert chosen.confirm_plan().min_seconds == 10.0
    with pytest.raises(ValidationError, match="confirmation window .* is shorter than"):
        TuneOptions(workload="builtin:image-cnn", min_seconds=2.0, confirm_seconds=1.0)


@pytest.mark.slow
def test_confirmation_runs_use_the_longer_window(tmp_path: Path) -> None:
    db = open_database(str(tmp_path / "jobs.db"))
    try:
        # Windows of a second: a search window of the fast plan's 0.3 s ran to 1.1 s once (a
        # window ends on a whole round of workers or a whole epoch), past twice 0.3 s.
        options = TuneOptions(
            workload=str(WORKLOADS / "tiny.py"),
            n_trials=3,
            device="cpu",
            confirm_rounds=1,
            confirm_top=1,
            profile=False,
            **{**FAST, "min_seconds": 1.0},
        )
        job = run_job(db, create_job(db, options, status="running"))
        assert job.status == "succeeded"
        assert job.options["confirm_seconds"] is None  # stored as given: the default factor
        with db.session() as session:
            trials = [(t.phase, t.window_s, t.steps) for t in session.scalars(select(Trial))]
    finally:
        db.dispose()
    confirm_plan = options.confirm_plan()
    searched = [t for t in trials if t[0] != "confirm"]
    confirmed = [t for t in trials if t[0] == "confirm"]
    assert len(searched) == 3 and len(confirmed) == 2  # the best candidate and the baseline
    for _, window_s, steps in confirmed:
        assert window_s >= confirm_plan.min_seconds and steps >= confirm_plan.min_steps
    # A trial pruned before its window has none (a compile stopped at its allowance, say).
    windows = [window_s for _, window_s, _ in searched if window_s is not None]
    assert windows and all(window_s < confirm_plan.min_seconds for window_s in windows)


@pytest.mark.slow
def test_ctrl_c_inside_a_study_statement_still_marks_the_job_interrupted(tmp_path: Path) -> None:
    """Ctrl-C lands wherever the job is; inside one of Optuna's SQLite statements it used to
    leave the write lock held, so storing "interrupted" waited out the busy timeout and failed.
    The interrupt is raised as the signal would, from inside Optuna's next read after a trial
    was told."""
    told = threading.Event()

    def interrupt_once(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.startswith("INSERT INTO trial_values"):
            told.set()
        elif told.is_set() and statement.startswith("SELECT trials.trial_id"):
            told.clear()
            event.remove(Engine, "after_cursor_execute", interrupt_once)
            raise KeyboardInterrupt

    db = open_database(str(tmp_path / "jobs.db"))
    try:
        options = TuneOptions(
            workload=str(WORKLOADS / "tiny.py"),
            n_trials=3,
            device="cpu",
            confirm_rounds=1,
            confirm_top=1,
            profile=False,
            **FAST,
        )
        job_id = create_job(db, options, status="running")
        event.listen(Engine, "after_cursor_execute", interrupt_once)
        try:
            with pytest.raises(KeyboardInterrupt):
                run_job(db, job_id)
        finally:
            if event.contains(Engine, "after_cursor_execute", interrupt_once):
                event.remove(Engine, "after_cursor_execute", interrupt_once)
        assert load_job(db, job_id).status == "interrupted"
        assert run_job(db, job_id).status == "succeeded"  # and it resumes
    finally:
        db.dispose()
