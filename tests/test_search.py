"""The search loop on a real in-memory Optuna study with a deterministic fake measurement."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import optuna
import pytest
from optuna.trial import TrialState

from autotune.search import (
    InfeasibleSet,
    Observation,
    RelativeToBestPruner,
    SearchState,
    enqueue_first_trials,
    fail_interrupted_trials,
    make_sampler,
    run_search,
)
from autotune.space import Config, DeviceInfo, SearchSpace, WorkloadInfo

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
    run_search(study, space, state, measure, n_trials,
               on_skip=lambda config, reason: skips.append((config, reason)))
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
    space = SearchSpace(CPU, TOKENS, fixed={"amp": "off", "prefetch_factor": 2},
                        ranges={"batch_size": "16,32", "num_workers": "0,2,4"})
    assert space.size() == 10
    return space


def test_duplicates_are_told_their_known_value_without_measuring() -> None:
    space = small_space()
    study, state, measure, _ = search(space, n_trials=9)
    assert isinstance(study.sampler, optuna.samplers.TPESampler)
    assert len(measure.calls) == len(set(measure.keys)) == state.measured
    duplicates = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("duplicate")]
    assert duplicates, "the sampler never proposed a configuration twice; the test proves nothing"
    for trial in duplicates:
        key = space.config_from(trial.params).key()
        assert trial.state == TrialState.COMPLETE
        assert trial.value == state.values[key]


def test_a_space_just_larger_than_the_budget_gets_the_whole_budget() -> None:
    # TPE proposes the same few configurations again and again; the search must still find
    # the unmeasured ones rather than give up with trials left and the space not exhausted.
    space = small_space()
    _, state, measure, _ = search(space, n_trials=9)
    assert len(set(measure.keys)) == state.measured == 9
    assert not state.exhausted


def test_configurations_that_need_more_memory_than_an_oom_are_skipped() -> None:
    space = SearchSpace(CPU, IMAGES, ranges={"batch_size": "64..512", "num_workers": "0,2"},
                        fixed={"channels_last": False, "persistent_workers": False})
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
        infeasible.reason(Config(batch_size=512)) or "")


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


def test_make_sampler_brute_force_only_when_the_space_fits() -> None:
    space = SearchSpace(CPU, TOKENS, fixed={"amp": "off"},
                        ranges={"batch_size": "16,32", "num_workers": "0,2"})
    size = space.size()
    assert size == 2 * (1 + 5 * 2)
    assert isinstance(make_sampler(space, size, 0), optuna.samplers.BruteForceSampler)
    assert isinstance(make_sampler(space, size + 1, 0), optuna.samplers.BruteForceSampler)
    assert isinstance(make_sampler(space, size - 1, 0), optuna.samplers.TPESampler)


@pytest.mark.parametrize("extra", [0, 10])
def test_brute_force_search_ends_by_exhaustion_without_duplicates(extra: int) -> None:
    space = SearchSpace(
        CPU, TOKENS, fixed={"amp": "off", "prefetch_factor": 2},
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
    space.suggest(running)
    assert [t.number for t in study.get_trials(states=(TrialState.RUNNING,))] == [running.number]

    stale = fail_interrupted_trials(study)
    assert [t.number for t in stale] == [running.number]
    assert stale[0].params == running.params
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert states == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.FAIL]
    assert fail_interrupted_trials(study) == []


# -- pruning ---------------------------------------------------------------------------------


def pruning_study(finished: list[float]) -> optuna.Study:
    study = optuna.create_study(
        direction="maximize",
        pruner=RelativeToBestPruner(ratio=0.5, min_completed=3, min_reports=2),
    )
    for value in finished:
        study.add_trial(optuna.trial.create_trial(value=value))
    return study


def should_prune(study: optuna.Study, reports: list[float]) -> bool:
    trial = study.ask()
    for step, value in enumerate(reports):
        trial.report(value, step)
    return trial.should_prune()


def test_pruner_prunes_only_below_ratio_of_best() -> None:
    study = pruning_study([100.0, 80.0, 60.0])
    assert should_prune(study, [90.0, 49.0])
    assert not should_prune(study, [90.0, 50.0])
    assert not should_prune(study, [10.0, 60.0])
    # Only the latest report counts.
    assert should_prune(study, [60.0, 10.0])


def test_pruner_waits_for_min_completed() -> None:
    assert not should_prune(pruning_study([100.0, 80.0]), [1.0, 1.0])
    # Failed configurations (value 0) are not completed measurements.
    assert not should_prune(pruning_study([100.0, 0.0, 0.0]), [1.0, 1.0])
    assert should_prune(pruning_study([100.0, 0.0, 1.0, 2.0]), [1.0, 1.0])


def test_pruner_waits_for_min_reports() -> None:
    study = pruning_study([100.0, 80.0, 60.0])
    assert not should_prune(study, [])
    assert not should_prune(study, [1.0])
    assert should_prune(study, [1.0, 1.0])


def test_pruning_rule_runs_on_values_in_memory() -> None:
    # The tuner reads the finished values before a trial starts and applies this rule to the
    # trial's progress reports in memory: no storage is touched while a window is timed.
    from autotune.search import clearly_slow

    finished = [100.0, 120.0, 90.0]
    assert clearly_slow([40.0, 45.0], finished)
    assert not clearly_slow([40.0, 65.0], finished)  # the latest report decides
    assert not clearly_slow([10.0], finished)  # one report is too few to judge
    assert not clearly_slow([10.0, 10.0], finished[:2])  # too few finished trials
