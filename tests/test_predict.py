"""Predicting every configuration from a profile: the bounds, memory, uncertainty, speed."""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.predict import (
    AccumulationPoint,
    Columns,
    ForkCopyPoint,
    HeapPoint,
    LoaderPoint,
    MemoryModel,
    Profile,
    StepPoint,
    predict_configs,
    predict_space,
    ranking,
)
from autotune.predict._host_effects import loaded_at_once
from autotune.predict._loader import _loader_part
from autotune.predict._profile import running_median
from autotune.predict._soft_min import SOFT_MIN_POWER
from autotune.recommend import TrialView, ceiling_sentence
from autotune.space import Config, DeviceInfo, SearchSpace, WorkloadInfo, default_max_workers
from autotune.tuner._calibration import (
    ScaleClass,
    covered_ratios,
    highest_other_ratio,
    measured_scales,
)
from autotune.tuner._judges import below_reach, predicted_too_slow
from autotune.tuner._predictor import Predictor
from autotune.tuner._seeding import seed_configs

CPU = DeviceInfo(
    type="cpu", name="test cpu", memory_bytes=16 * 2**30, cpu_count=2, bf16_supported=True
)
GPU = DeviceInfo(
    type="cuda",
    name="test gpu",
    memory_bytes=80 * 2**30,
    index=0,
    cpu_count=16,
    bf16_supported=True,
    compute_capability=(9, 0),
)
IMAGES = WorkloadInfo(name="images", dataset_length=1_000_000, input_batch_ndim=4, batch_size=32)
TOKENS = WorkloadInfo(name="tokens", dataset_length=100_000, input_batch_ndim=2, batch_size=32)
#: Profiles and trial measurements of real jobs, kept to replay the predictor over.
RECORDED = Path(__file__).resolve().parent / "recorded"


def recorded_ratios(name: str, runs_key: str) -> npt.NDArray[np.float64]:
    """Measured / predicted of the runs under ``runs_key`` of a recorded job (tests/recorded/),
    predicted from its profile by this code."""
    recorded = json.loads((RECORDED / name).read_text())
    profile = Profile.model_validate(recorded["profile"])
    runs = recorded[runs_key]
    predicted = predict_configs(profile, [Config.model_validate(r["config"]) for r in runs])
    return np.array([r["samples_per_s"] for r in runs]) / predicted.samples_per_s


def make_profile(
    step_rates: dict[int, float],
    loader_rates: dict[int, float],
    device_type: str = "cpu",
    per_sample_bytes: float = 0.0,
    step_cores: float = 1.0,
    loader_cpu: float = 1e-4,
    dataset_length: int | None = None,
    restart_s_per_worker: float | None = None,
) -> Profile:
    step = [
        StepPoint(
            batch_size=b,
            amp="off",
            samples_per_s=r,
            cpu_cores=step_cores if device_type == "cpu" else None,
            peak_memory_bytes=int(2**28 + per_sample_bytes * b),
        )
        for b, r in step_rates.items()
    ]
    loader = [
        LoaderPoint(
            num_workers=w,
            samples_per_s=r,
            cpu_s_per_sample=loader_cpu,
            main_cpu_s_per_batch=1e-5 if w else None,
            restart_s=(
                restart_s_per_worker * w if w and restart_s_per_worker is not None else None
            ),
        )
        for w, r in loader_rates.items()
    ]
    memory = MemoryModel.fit("off", False, [(p.batch_size, p.peak_memory_bytes or 0) for p in step])
    return Profile(
        device_type=device_type,
        cpu_count=2,
        step=step,
        loader=loader,
        memory=[memory] if memory else [],
        loader_batch_size=32,
        sample_bytes=1024,
        dataset_length=dataset_length,
    )


def small_space(ranges: dict[str, str], fixed: dict[str, object] | None = None) -> SearchSpace:
    return SearchSpace(CPU, TOKENS, fixed={"amp": "off", **(fixed or {})}, ranges=ranges)


def test_columns_of_a_space_are_its_configurations_in_order() -> None:
    space = SearchSpace(CPU, IMAGES, ranges={"batch_size": "8..64", "num_workers": "0,2"})
    columns = Columns.of_space(space)
    configs = list(space.all_configs())
    assert len(columns) == len(configs) == space.size()
    expected = Columns.of(configs)
    for name in Columns.__dataclass_fields__:
        assert np.array_equal(getattr(columns, name), getattr(expected, name)), name


def test_columns_of_a_space_holding_the_effective_batch_accumulate_to_it() -> None:
    space = SearchSpace(
        CPU, IMAGES, ranges={"batch_size": "8..64", "num_workers": "0,2"}, effective_batch=64
    )
    columns = Columns.of_space(space)
    configs = list(space.all_configs())
    assert {c.grad_accum_steps for c in configs} == {1, 2, 4, 8}
    expected = Columns.of(configs)
    for name in Columns.__dataclass_fields__:
        assert np.array_equal(getattr(columns, name), getattr(expected, name)), name


def test_accumulating_gradients_pays_the_optimizer_step_once_per_accumulation() -> None:
    """Each step point paid one optimizer step (timed alone: 2.5 ms); a micro-step adding into
    the gradients kept takes 0.5 ms more than one writing them afresh. Accumulating over k
    micro-batches pays the optimizer step once per k and the addition k - 1 times, so each
    micro-step is 2 ms x (1 - 1/k) shorter (on a 2-core Xeon text-transformer's batch 16 ran
    5% faster accumulating over two than alone). A profile without the timing predicts every
    accumulation alike."""
    base = make_profile({16: 640.0, 32: 800.0}, {0: 1e6})  # batch 16: 25 ms a step
    point = AccumulationPoint(amp="off", batch_size=16, optimizer_s=0.0025, accumulate_s=0.0005)
    profile = base.model_copy(update={"accumulation": point})

    def step_rates(at: Profile, batch: int) -> list[float]:
        configs = [Config(batch_size=batch, grad_accum_steps=k) for k in (1, 2, 4)]
        return list(predict_configs(at, configs).step_samples_per_s)

    alone, two, four = step_rates(profile, 16)
    receive = 16 / alone - 0.025  # what the prediction adds beside the step: unchanged
    assert 16 / two == pytest.approx(0.025 - 0.001 + receive)
    assert 16 / four == pytest.approx(0.025 - 0.0015 + receive)
    assert step_rates(base, 16) == pytest.approx([alone] * 3)
    # An addition timed longer than the optimizer step saves nothing (and costs nothing).
    costly = point.model_copy(update={"accumulate_s": 0.003})
    assert step_rates(base.model_copy(update={"accumulation": costly}), 16) == pytest.approx(
        [alone] * 3
    )
    # A saving timed longer than the whole step (noise) counts as the whole step: a
    # micro-step of four is then a quarter of one alone, never less.
    slow = base.model_copy(update={"accumulation": point.model_copy(update={"optimizer_s": 1.0})})
    alone, _, four = step_rates(slow, 32)
    assert 32 / four - receive == pytest.approx((32 / alone - receive) / 4, rel=0.05)
    assert profile.public_dict()["accumulation"] == point.model_dump()


@settings(max_examples=60, deadline=None)
@given(
    step=st.dictionaries(st.sampled_from([8, 16, 32, 64, 128]), st.floats(10.0, 1e5), min_size=1),
    loader=st.dictionaries(st.sampled_from([0, 1, 2, 4, 8, 16]), st.floats(10.0, 1e5), min_size=1),
    batch=st.sampled_from([8, 16, 24, 32, 48, 64, 96, 128]),
    workers=st.sampled_from([0, 1, 2, 3, 4, 6, 8, 12, 16]),
    dataset_length=st.sampled_from([None, 100, 1000, 100_000]),
    persistent=st.booleans(),
)
def test_a_prediction_never_exceeds_the_step_alone_nor_the_loader_alone(
    step: dict[int, float],
    loader: dict[int, float],
    batch: int,
    workers: int,
    dataset_length: int | None,
    persistent: bool,
) -> None:
    def profile_of(steps: dict[int, float], loaders: dict[int, float]) -> Profile:
        return make_profile(
            steps, loaders, dataset_length=dataset_length, restart_s_per_worker=0.01
        )

    profile = profile_of(step, loader)
    config = Config(
        batch_size=batch, num_workers=workers, persistent_workers=persistent and workers > 0
    )
    predicted = float(predict_configs(profile, [config]).samples_per_s[0])
    step_only = profile_of(step, {w: 1e12 for w in loader})
    loader_only = profile_of({b: 1e12 for b in step}, loader)
    # Each bound alone (the other made free) is at least the prediction with both.
    assert predicted <= float(predict_configs(step_only, [config]).samples_per_s[0]) * (1 + 1e-9)
    assert predicted <= float(predict_configs(loader_only, [config]).samples_per_s[0]) * (1 + 1e-9)
    assert predicted > 0


@settings(max_examples=60, deadline=None)
@given(
    loader=st.dictionaries(st.sampled_from([0, 1, 2, 4, 8, 16]), st.floats(10.0, 1e5), min_size=1),
    factor=st.floats(1.0, 10.0),
)
def test_a_faster_loader_never_lowers_a_prediction(loader: dict[int, float], factor: float) -> None:
    space = small_space(ranges={"batch_size": "8..64"})
    slow = predict_space(make_profile({8: 500.0, 64: 4000.0}, loader), space)
    fast = predict_space(
        make_profile({8: 500.0, 64: 4000.0}, {w: r * factor for w, r in loader.items()}), space
    )
    assert np.all(fast.samples_per_s >= slow.samples_per_s * (1 - 1e-9))


#: A loader whose every read waits 15 ms on storage and holds no CPU: its samples/s grow with
#: the workers, and one worker takes 15 ms per sample whatever the others do.
READ_S = 0.015
WAITING_READS = {w: max(1, w) / READ_S for w in (0, 1, 2, 4, 8, 16, 32, 64, 128)}
#: CPU seconds such a read costs: next to none, so the cores' share never comes near.
WAITING_CPU = 1e-7


def _predicted(
    profile: Profile,
    batch_size: int,
    num_workers: int,
    persistent_workers: bool = False,
    retain_freed_memory: bool = False,
) -> float:
    config = Config(
        batch_size=batch_size,
        num_workers=num_workers,
        persistent_workers=persistent_workers,
        retain_freed_memory=retain_freed_memory,
    )
    return float(predict_configs(profile, [config]).samples_per_s[0])


def test_workers_beyond_an_epochs_batches_have_nothing_to_do() -> None:
    # 4,096 samples: batch 256 makes 16 batches, so 64 workers keep only 16 busy.
    profile = make_profile(
        {32: 1e6, 256: 1e6}, WAITING_READS, dataset_length=4096, loader_cpu=WAITING_CPU
    )
    big = _predicted(profile, batch_size=256, num_workers=64, persistent_workers=True)
    assert big == pytest.approx(4096 / (256 * READ_S), rel=0.05)
    assert big == pytest.approx(
        _predicted(profile, batch_size=256, num_workers=16, persistent_workers=True), rel=0.01
    )
    # Batch 32 makes 128 batches: two full rounds of the 64 workers.
    small = _predicted(profile, batch_size=32, num_workers=64, persistent_workers=True)
    assert small == pytest.approx(4096 / (2 * 32 * READ_S), rel=0.05)
    # Without epochs (a dataset of unknown length) the two look alike.
    endless = make_profile({32: 1e6, 256: 1e6}, WAITING_READS, loader_cpu=WAITING_CPU)
    assert _predicted(endless, batch_size=256, num_workers=64) == pytest.approx(
        _predicted(endless, batch_size=32, num_workers=64), rel=0.01
    )


def test_an_epochs_last_round_takes_as_long_as_a_full_one() -> None:
    # 128 batches of 32: 128 workers deliver them in one round, 127 need a second for the last.
    profile = make_profile({32: 1e6}, WAITING_READS, dataset_length=4096, loader_cpu=WAITING_CPU)
    one_round = _predicted(profile, batch_size=32, num_workers=128, persistent_workers=True)
    two_rounds = _predicted(profile, batch_size=32, num_workers=127, persistent_workers=True)
    assert two_rounds == pytest.approx(one_round / 2, rel=0.05)


def test_a_worker_count_between_two_timed_is_read_through_the_seconds_a_round_takes() -> None:
    # Workers that each wait on storage at their own pace: 24 deliver three times what 8 do
    # (read in log(1 + workers), 24 came out 1.34x too fast).
    waiting = {8: 8 / READ_S, 48: 48 / READ_S}
    assert _loader_part(make_profile({32: 1e6}, waiting).loader, 24).samples_per_s == pytest.approx(
        24 / READ_S
    )
    # Workers that share saturated cores: a count between delivers what both timed do.
    saturated = {2: 200.0, 8: 200.0}
    assert _loader_part(
        make_profile({32: 1e6}, saturated).loader, 4
    ).samples_per_s == pytest.approx(200.0)


@settings(max_examples=200, deadline=None)
@given(
    low=st.integers(1, 63),
    gap=st.integers(2, 64),
    share=st.floats(0.0, 1.0),
    low_rate=st.floats(1.0, 1e5),
    high_rate=st.floats(1.0, 1e5),
)
def test_a_worker_count_between_two_timed_reads_between_their_rates(
    low: int, gap: int, share: float, low_rate: float, high_rate: float
) -> None:
    high = low + gap
    between = low + 1 + int(share * (gap - 2))
    loader = make_profile({32: 1e6}, {low: low_rate, high: high_rate}).loader
    rate = _loader_part(loader, between).samples_per_s
    assert min(low_rate, high_rate) * (1 - 1e-9) <= rate <= max(low_rate, high_rate) * (1 + 1e-9)


def test_a_recorded_many_workers_jobs_trials_between_its_counts_are_predicted_in_band() -> None:
    """A reduced many-workers job on a 2-core Xeon (tests/recorded/): its loader sweep timed 8
    and 48 workers, its trials ran 24 workers and batch 64 with 48 (an epoch of 64 batches
    ends on a round of 16 workers). Read in log(1 + workers), the counts between came out
    fast: those trials measured 0.74-0.89 of their predictions."""
    ratios = recorded_ratios("many_workers_reduced_job.json", "runs")
    assert np.all((ratios >= 0.85) & (ratios <= 1.15)), ratios


def test_without_persistent_workers_each_epoch_starts_them_again() -> None:
    restart = 0.02  # seconds to start one worker
    profile = make_profile(
        {32: 1e6},
        WAITING_READS,
        dataset_length=4096,
        restart_s_per_worker=restart,
        loader_cpu=WAITING_CPU,
    )
    kept = _predicted(profile, batch_size=32, num_workers=64, persistent_workers=True)
    restarted = _predicted(profile, batch_size=32, num_workers=64, persistent_workers=False)
    assert restarted == pytest.approx(4096 / (4096 / kept + 64 * restart), rel=1e-6)
    # A loader sweep that did not time restarts predicts none.
    untimed = make_profile({32: 1e6}, WAITING_READS, dataset_length=4096, loader_cpu=WAITING_CPU)
    assert _predicted(untimed, batch_size=32, num_workers=64) == pytest.approx(kept)


def test_workers_forked_each_epoch_cost_the_next_step_the_pages_it_copies() -> None:
    """Workers forked at an epoch's start share the training process's pages copy-on-write;
    retaining freed memory, its next step copies the heap it writes: the faults timed at the
    profile's batch, plus the memory model's pages per sample beyond it, at the cost timed."""
    per_sample = 4096.0 * 100  # a hundred pages a sample
    base = make_profile(
        {32: 1e6, 256: 1e6},
        WAITING_READS,
        dataset_length=4096,
        per_sample_bytes=per_sample,
        loader_cpu=WAITING_CPU,
    )
    point = ForkCopyPoint(amp="off", batch_size=32, faults=5_000, seconds=0.05)  # 10 us each
    profile = base.model_copy(update={"fork_copy": point, "retained_freed_memory": True})
    options = {"batch_size": 256, "num_workers": 64, "retain_freed_memory": True}
    kept = _predicted(profile, persistent_workers=True, **options)
    restarted = _predicted(profile, persistent_workers=False, **options)
    copied_s = (5_000 + 100 * (256 - 32)) * 1e-5
    assert restarted == pytest.approx(4096 / (4096 / kept + copied_s), rel=1e-6)
    # Persistent workers fork once; glibc's defaults map a step's large blocks afresh.
    assert _predicted(base, persistent_workers=False, **options) == pytest.approx(kept)
    assert _predicted(
        profile, persistent_workers=False, batch_size=256, num_workers=64
    ) == pytest.approx(_predicted(profile, persistent_workers=True, batch_size=256, num_workers=64))
    assert profile.public_dict()["fork_copy"] == point.model_dump()


def test_the_slower_side_is_named_as_the_bound() -> None:
    space = small_space(ranges={"batch_size": "32", "num_workers": "4"})
    loader_bound = predict_space(make_profile({32: 10_000.0}, {0: 100.0, 4: 400.0}), space)
    assert {loader_bound.bound_name(i) for i in range(len(loader_bound))} == {"loader"}
    step_bound = predict_space(make_profile({32: 100.0}, {0: 1e4, 4: 4e4}), space)
    assert {step_bound.bound_name(i) for i in range(len(step_bound))} == {"step"}


def test_the_training_thread_also_receives_and_copies_each_batch() -> None:
    # Seen on an H200: a launch-bound step of 3.4 ms, 1.8 ms receiving the batch from the
    # workers and 0.2 ms copying it ran one after the other on the training thread.
    profile = make_profile({64: 64 / 3.4e-3, 256: 256 / 6e-3}, {0: 1e6, 8: 1e6}, device_type="cuda")
    step = [p.model_copy(update={"copy_s": 0.2e-3 * p.batch_size / 128}) for p in profile.step]
    loader = [
        p.model_copy(update={"main_cpu_s_per_batch": 1.8e-3 if p.num_workers else None})
        for p in profile.loader
    ]
    profile = profile.model_copy(update={"step": step, "loader": loader})
    configs = [
        Config(batch_size=64, num_workers=8),
        Config(batch_size=64, num_workers=0),
        Config(batch_size=64, num_workers=8, pin_memory=True),
        Config(batch_size=256, num_workers=8),
    ]
    predicted = predict_configs(profile, configs).samples_per_s
    assert predicted[0] == pytest.approx(64 / (3.4e-3 + 1.8e-3 + 0.1e-3), rel=1e-3)
    # Without workers nothing is received; the copy stays.
    assert predicted[1] == pytest.approx(1 / (1 / (64 / 3.5e-3) + 1 / 1e6), rel=1e-3)
    # From pinned memory the copy does not hold the thread up.
    assert predicted[2] == pytest.approx(64 / (3.4e-3 + 1.8e-3), rel=1e-3)
    # Each batch size copies its own bytes.
    assert predicted[3] == pytest.approx(256 / (6e-3 + 1.8e-3 + 0.4e-3), rel=1e-3)


def test_on_a_cpu_the_step_and_the_loader_share_the_cores() -> None:
    # Each alone is fast, but together they need more CPU than two cores have.
    profile = make_profile({32: 10_000.0}, {0: 1e4, 4: 1e4}, step_cores=2.0, loader_cpu=4e-4)
    predicted = predict_configs(profile, [Config(batch_size=32, num_workers=4)])
    cores_bound = 2 / (2.0 / 10_000 + 4e-4)
    assert predicted.samples_per_s[0] <= cores_bound * (1 + 1e-9)
    assert predicted.bound_name(0) == "cpu"


def test_a_loader_near_the_cores_share_slows_before_the_share_binds() -> None:
    """The workers were timed with the cores to themselves: beside a step they wait for busy
    cores. A loader at the share itself is predicted at 71% of it; one far below the share,
    or on CUDA (no share), at its own rate."""
    loader_cpu = 2e-4  # the share: 2 cores / 2e-4 CPU-s a sample (a step that costs nothing)
    at_share = make_profile({32: 1e9}, {0: 1e4, 8: 1e4}, step_cores=0.0, loader_cpu=loader_cpu)
    predicted = predict_configs(at_share, [Config(batch_size=32, num_workers=8)])
    assert predicted.samples_per_s[0] == pytest.approx(1e4 / 2**0.5, rel=0.02)
    far_below = make_profile({32: 1e9}, {0: 1e3, 8: 1e3}, step_cores=0.0, loader_cpu=loader_cpu)
    predicted = predict_configs(far_below, [Config(batch_size=32, num_workers=8)])
    assert predicted.samples_per_s[0] == pytest.approx(1e3, rel=0.02)
    on_cuda = make_profile({32: 1e9}, {0: 1e4, 8: 1e4}, device_type="cuda", loader_cpu=loader_cpu)
    predicted = predict_configs(on_cuda, [Config(batch_size=32, num_workers=8)])
    assert predicted.samples_per_s[0] == pytest.approx(1e4, rel=0.02)


def test_a_recorded_slow_storage_jobs_finalists_are_predicted_within_the_band() -> None:
    """A default slow-storage job on a 2-core EPYC (tests/recorded/): its finalists train with
    48 workers on 2 cores, the loader at 0.8 of the cores' share. With a hard minimum of the
    two their 15 confirmation runs read 0.66-0.96 of their predictions (7 within 0.85-1.15)."""
    ratios = recorded_ratios("slow_storage_default_job.json", "confirmation_runs")
    assert 0.9 <= float(np.median(ratios)) <= 1.1, ratios
    assert np.sum((ratios >= 0.85) & (ratios <= 1.15)) >= 12, ratios


def test_a_lone_step_point_off_its_curve_is_read_as_its_neighbours_say() -> None:
    # A default image-cnn job's channels_last points on a 2-core EPYC (2026-11-28).
    assert running_median([1718.0, 1448.0, 2026.0, 2278.0, 1700.0, 1441.0]) == [
        1718.0,
        1718.0,
        2026.0,
        2026.0,
        1700.0,
        1441.0,
    ]
    spiked = make_profile({32: 1000.0, 64: 1800.0, 128: 1100.0}, {0: 1e9})
    assert _predicted(spiked, 64, 0) == pytest.approx(1100.0, rel=0.01)
    # The ceiling the diagnosis quotes is read on the same curve: not the lone window.
    best = spiked.best_step()
    assert best is not None and (best.batch_size, best.samples_per_s) == (64, 1100.0)
    # The JSON shows both readings of each point, so the quoted ceiling can be found in it.
    shown = {
        p["batch_size"]: (p["samples_per_s"], p["curve_samples_per_s"])
        for p in spiked.public_dict()["step"]
    }
    assert shown == {32: (1000.0, 1000.0), 64: (1800.0, 1100.0), 128: (1100.0, 1100.0)}


@given(st.lists(st.floats(min_value=1.0, max_value=1e6), min_size=1, max_size=12))
def test_a_monotone_curve_is_read_as_measured(rates: list[float]) -> None:
    assert running_median(sorted(rates)) == sorted(rates)
    assert running_median(sorted(rates, reverse=True)) == sorted(rates, reverse=True)


def test_a_recorded_text_transformer_jobs_trials_are_predicted_closer_through_the_curve() -> None:
    """A default text-transformer job on a 2-core EPYC (tests/recorded/): its step points read
    231-389 samples/s, batch 32's 389 between 359 and 304. Its 23 trials' median distance from
    their predictions: 24% with the points read one by one, 14% through the running median."""
    ratios = recorded_ratios("text_transformer_default_job.json", "runs")
    assert float(np.median(np.abs(np.log(ratios)))) < 0.18, ratios


def test_configurations_over_the_memory_budget_are_marked_and_never_ranked() -> None:
    profile = make_profile({8: 100.0, 64: 800.0}, {0: 1e5}, per_sample_bytes=2**20)
    budget = 2**28 + 40 * 2**20  # fits batch 32, not 48 or 64
    space = small_space(ranges={"batch_size": "8..64"}, fixed={"num_workers": 0})
    predictions = predict_space(profile, space, budget)
    over = {
        int(b)
        for b, o in zip(predictions.columns.batch_size, predictions.over_memory, strict=True)
        if o
    }
    assert over == {48, 64}
    assert all(
        predictions.bound_name(i) == "memory"
        for i in range(len(predictions))
        if predictions.over_memory[i]
    )
    assert all(config.batch_size <= 32 for config, _ in ranking(predictions, space))
    seeds = seed_configs(predictions, space, 20, [space.baseline()])
    assert seeds and all(config.batch_size <= 32 for config in seeds)


def test_the_predicted_best_seeds_are_distinct_points_of_the_profile() -> None:
    # Loader-bound with workers: every prefetch/persistence variant of a batch and worker count
    # is predicted alike, so the three best seeds must differ in batch or workers, not only in
    # knobs the profile never measured.
    profile = make_profile({32: 1e4, 64: 1.2e4, 128: 1.3e4}, {0: 100.0, 2: 800.0, 4: 1600.0})
    space = small_space(
        ranges={"batch_size": "32,64,128", "num_workers": "0,2,4", "prefetch_factor": "1,2,4"}
    )
    predictions = predict_space(profile, space)
    top = ranking(predictions, space, 3)
    assert len({(c.batch_size, c.num_workers) for c, _ in top}) < 3  # variants lead the ranking
    baseline = space.baseline()
    seeds = seed_configs(predictions, space, 20, [baseline])[:3]
    points = {(c.batch_size, c.num_workers, c.amp, c.channels_last) for c in seeds}
    assert len(points) == 3
    assert (
        baseline.batch_size,
        baseline.num_workers,
        baseline.amp,
        baseline.channels_last,
    ) not in points
    assert seeds[0].key() == top[0][0].key()


def test_uncovered_knobs_and_extrapolation_raise_the_uncertainty() -> None:
    profile = make_profile({32: 1000.0, 64: 2000.0}, {0: 500.0, 2: 1000.0}, device_type="cuda")
    plain, pinned, beyond = predict_configs(
        profile,
        [
            Config(batch_size=32, num_workers=2, prefetch_factor=1),
            Config(
                batch_size=32,
                num_workers=2,
                prefetch_factor=1,
                pin_memory=True,
                device_prefetch=True,
            ),
            Config(batch_size=512, num_workers=16, prefetch_factor=1),
        ],
    ).uncertainty
    assert plain < pinned
    assert plain < beyond


def test_of_equal_predictions_the_allocator_the_profile_ran_with_leads() -> None:
    # The profile cannot time glibc's defaults and retained memory in one process; it runs
    # with the setting the space can reach, and of two otherwise equal configurations the one
    # it measured is ranked first (and seeded), the other marked less certain.
    space = SearchSpace(
        CPU.model_copy(update={"glibc_malloc": True}),
        TOKENS,
        fixed={"amp": "off", "intra_op_threads": None},
        ranges={"batch_size": "32,64", "num_workers": "0"},
    )
    assert space.searched["retain_freed_memory"] == (False, True)
    profile = make_profile({32: 1000.0, 64: 2000.0}, {0: 1e5}).model_copy(
        update={"retained_freed_memory": True}
    )
    predictions = predict_space(profile, space)
    top = ranking(predictions, space)
    assert [(c.batch_size, c.retain_freed_memory) for c, _ in top] == [
        (64, True),
        (64, False),
        (32, True),
        (32, False),
    ]
    assert top[0][1] == top[1][1]
    default, retained = predict_configs(
        profile, [Config(batch_size=64), Config(batch_size=64, retain_freed_memory=True)]
    ).uncertainty
    assert retained < default
    seeds = seed_configs(predictions, space, 20, [space.baseline()])
    assert seeds[0] == Config(batch_size=64, retain_freed_memory=True)


def test_glibcs_defaults_are_predicted_at_the_fresh_heap_ratio_of_their_precision() -> None:
    """A trial with glibc's defaults faults its freed pages in again each step; the profile
    timed that against retained memory per precision and scales those configurations' step,
    the faulting time on one core. Where it timed both, only workers stay uncovered."""
    profile = make_profile({32: 1000.0, 64: 2000.0}, {0: 1e6, 2: 1e6})
    bf16 = [
        p.model_copy(update={"amp": "bf16", "samples_per_s": 2 * (p.samples_per_s or 0)})
        for p in profile.step
    ]
    heap = [
        HeapPoint(
            amp="off", batch_size=32, ratio=0.8, faults_per_step=2000, retained_faults_per_step=3
        ),
        HeapPoint(
            amp="bf16", batch_size=32, ratio=0.5, faults_per_step=6000, retained_faults_per_step=3
        ),
    ]
    timed = profile.model_copy(
        update={"step": [*profile.step, *bf16], "fresh_heap": heap, "retained_freed_memory": True}
    )
    configs = [
        Config(batch_size=64, amp=amp, retain_freed_memory=retain)
        for amp in ("off", "bf16")
        for retain in (True, False)
    ]
    steps = predict_configs(timed, configs).step_samples_per_s
    assert steps[1] / steps[0] == pytest.approx(0.8)
    assert steps[3] / steps[2] == pytest.approx(0.5)
    # Where a precision was not timed (outpaced), the first precision's ratio stands in.
    only_fp32 = timed.model_copy(update={"fresh_heap": heap[:1]})
    steps = predict_configs(only_fp32, configs).step_samples_per_s
    assert steps[3] / steps[2] == pytest.approx(0.8)
    # An older profile, without the ratio, predicts both alike and marks glibc's uncertain.
    older = timed.model_copy(update={"fresh_heap": []})
    at = predict_configs(older, configs[:2])
    assert at.step_samples_per_s[0] == at.step_samples_per_s[1]
    assert at.uncovered_knobs(1) == {"retain_freed_memory"}
    with_ratio = predict_configs(
        timed, [*configs[:2], Config(batch_size=64, num_workers=2, prefetch_factor=1)]
    )
    assert with_ratio.uncovered_knobs(1) == frozenset()
    assert with_ratio.uncovered_knobs(2) == {"retain_freed_memory"}


def retained_or_not() -> tuple[SearchSpace, Profile, Predictor]:
    """Batch 32 or 64 without workers, with glibc's defaults or retained freed memory."""
    space = SearchSpace(
        CPU.model_copy(update={"glibc_malloc": True}),
        TOKENS,
        fixed={"amp": "off", "intra_op_threads": None},
        ranges={"batch_size": "32,64", "num_workers": "0"},
    )
    profile = make_profile({32: 1000.0, 64: 2000.0}, {0: 1e6}).model_copy(
        update={
            "retained_freed_memory": True,
            "fresh_heap": [
                HeapPoint(
                    amp="off",
                    batch_size=32,
                    ratio=0.8,
                    faults_per_step=2000,
                    retained_faults_per_step=3,
                )
            ],
        }
    )
    return space, profile, Predictor(profile, space, None)


def test_the_ceiling_takes_the_scale_the_covered_trials_ran_at() -> None:
    """The profile's few tenths of a second per point read the machine in one moment; the
    trials it covers tell the scale, per handling of freed memory, and a knob it did not time
    (torch.compile) is no error of its scale."""
    space, profile, predictor = retained_or_not()
    top = ranking(predictor.all(), space)[0][1]
    assert predictor.ceiling([]) == pytest.approx((top, top, top))

    def at(config: Config, share: float) -> tuple[Config, float]:
        return config, share * (predictor.samples_per_s(config) or 0.0)

    retained32 = Config(batch_size=32, retain_freed_memory=True)
    retained64 = Config(batch_size=64, retain_freed_memory=True)
    compiled = Config(batch_size=64, retain_freed_memory=True, compile="default")
    baseline = Config(batch_size=32)
    # Only the baseline (glibc's defaults) measured: every setting takes its scale.
    assert predictor.ceiling([at(baseline, 0.5)]) == pytest.approx((top, 0.5 * top, top))
    # Retained trials at 0.9 and 0.7 of their predictions: the retained scale is their median,
    # the baseline's stays its own; a compiled trial at three times its prediction and a
    # failed one (0 samples/s) count for nothing.
    measured = [
        at(baseline, 0.5),
        at(retained32, 0.9),
        at(retained64, 0.7),
        at(compiled, 3.0),
        (Config(batch_size=64), 0.0),
    ]
    covered = covered_ratios(profile, measured)
    # Every trial loads in the main process: a class with workers takes its heap's scale.
    assert measured_scales(covered) == {
        ScaleClass(True, True): pytest.approx(0.8),
        ScaleClass(True, False): pytest.approx(0.8),
        ScaleClass(False, True): pytest.approx(0.5),
        ScaleClass(False, False): pytest.approx(0.5),
    }
    # The highest scale a trial but the fastest measured ran at: retained64's 0.7 is the
    # fastest in samples/s, so retained32's 0.9.
    assert highest_other_ratio(covered) == pytest.approx(0.9)
    assert predictor.ceiling(measured) == pytest.approx((top, 0.8 * top, 0.9 * top))
    assert highest_other_ratio(covered_ratios(profile, measured[:1])) is None


def test_a_trial_s_scale_is_read_from_the_other_configurations_runs() -> None:
    """The job's prediction of a configuration is the profile's times the median measured /
    predicted of the runs of the others (its own are left out), with its handling of freed
    memory; none before any, and none for a knob the profile did not time."""
    _, _, predictor = retained_or_not()

    def at(config: Config, share: float) -> tuple[Config, float]:
        return config, share * (predictor.samples_per_s(config) or 0.0)

    retained32 = Config(batch_size=32, retain_freed_memory=True)
    retained64 = Config(batch_size=64, retain_freed_memory=True)
    baseline = Config(batch_size=32)
    assert predictor.scale(retained64, []) is None
    # Its own runs tell nothing of its prediction: only the others' count.
    assert predictor.scale(retained64, [at(retained64, 0.6)]) is None
    measured = [at(retained64, 0.6), at(retained32, 0.9), at(retained32, 0.7), at(baseline, 0.5)]
    assert predictor.scale(retained64, measured) == pytest.approx(0.8)
    assert predictor.scale(retained32, measured) == pytest.approx(0.6)
    # No other run with glibc's defaults: the median of all the others'.
    assert predictor.scale(baseline, measured) == pytest.approx(0.7)
    # A compiled step is no error of the profile's: no scale.
    compiled = Config(batch_size=64, retain_freed_memory=True, compile="default")
    assert predictor.scale(compiled, measured) is None


def test_trials_that_load_in_the_main_process_and_with_workers_are_scaled_apart() -> None:
    """The profile joins its loader and its step one after the other without workers and side
    by side with them, and each way errs its own way: a configuration takes the scale of the
    other runs that load as it does, those with its handling of freed memory where none does
    (then all); and so does the ceiling, per class."""
    space = SearchSpace(
        CPU,
        TOKENS,
        fixed={"amp": "off", "intra_op_threads": None},
        ranges={"batch_size": "32,64", "num_workers": "0,2"},
    )
    profile = make_profile({32: 1000.0, 64: 2000.0}, {0: 1e6, 2: 1e6})
    predictor = Predictor(profile, space, None)

    def at(config: Config, share: float) -> tuple[Config, float]:
        return config, share * (predictor.samples_per_s(config) or 0.0)

    main32, main64 = Config(batch_size=32), Config(batch_size=64)
    workers32, workers64 = (Config(batch_size=size, num_workers=2) for size in (32, 64))
    measured = [at(main32, 1.2), at(workers32, 0.8), at(workers64, 0.9)]
    assert predictor.scale(main64, measured) == pytest.approx(1.2)
    assert predictor.scale(workers64, measured) == pytest.approx(0.8)  # its own left out
    # No other run loads in the main process: the median of those with its heap, all here.
    assert predictor.scale(main32, measured) == pytest.approx(0.85)
    # Retaining freed memory, no run at all: the median of all.
    assert predictor.scale(
        main64.model_copy(update={"retain_freed_memory": True}), measured
    ) == pytest.approx(0.9)
    read, scaled, _ = predictor.ceiling(measured) or (0.0, 0.0, 0.0)
    predictions = predictor.all()
    loads_in_main = predictions.columns.num_workers == 0
    rates = predictions.samples_per_s
    assert scaled == pytest.approx(
        max(1.2 * rates[loads_in_main].max(), 0.85 * rates[~loads_in_main].max())
    )
    assert read == pytest.approx(rates.max())


def test_a_profile_predicts_the_biggest_space_quickly() -> None:
    space = SearchSpace(GPU, IMAGES, extra_workers=(96, 128))
    step = {b: 100.0 * b for b in space.choices["batch_size"][::3]}
    profile = make_profile(step, {0: 100.0, 1: 200.0, 8: 1600.0, 64: 9000.0}, device_type="cuda")
    started = time.perf_counter()
    predictions = predict_space(profile, space)
    elapsed = time.perf_counter() - started
    assert len(predictions) == space.size() > 200_000
    print(f"predicted {len(predictions):,} configurations in {elapsed:.2f} s")
    assert elapsed < 10.0, "predicting must use the profile's tables, not per-configuration work"


def test_extra_workers_join_the_grid_unless_the_user_set_num_workers() -> None:
    assert 48 in SearchSpace(CPU, TOKENS, extra_workers=(24, 48)).choices["num_workers"]
    assert max(SearchSpace(CPU, TOKENS).choices["num_workers"]) == default_max_workers(2)
    narrowed = SearchSpace(CPU, TOKENS, ranges={"num_workers": "0..8"}, extra_workers=(48,))
    assert max(narrowed.choices["num_workers"]) == 8
    fixed = SearchSpace(CPU, TOKENS, fixed={"num_workers": 4}, extra_workers=(48,))
    assert fixed.choices["num_workers"] == (4,)


def reaching(samples_per_s: float, batch_size: int = 64, num_workers: int = 16) -> TrialView:
    return TrialView(
        Config(batch_size=batch_size, num_workers=num_workers), "ok", samples_per_s=samples_per_s
    )


def test_the_ceiling_sentence_gives_both_bounds_and_the_share_reached() -> None:
    profile = make_profile({64: 9000.0}, {0: 200.0, 16: 3000.0})
    sentence = ceiling_sentence(profile, reaching(1500.0))
    assert sentence is not None
    assert "9,000 samples/s at batch 64 in fp32" in sentence
    assert "3,000 samples/s with 16 workers at batch 32" in sentence
    # (3,001: the receiving cost, 10 us a batch, does not grow with the batch.)
    assert re.search(
        r"the loader with 16 workers at 3,00[01]; the recommendation reaches "
        r"1,500 samples/s = 50% of the lower",
        sentence,
    ), sentence
    assert "loader bounds it" in sentence


def test_a_recommendation_without_workers_is_held_to_the_step_and_the_loader_in_turn() -> None:
    """Without workers the main process loads each batch, then steps on it: their times add.
    A default image-cnn job on a 2-core EPYC (2026-12-03) recommended batch 256 without
    workers; it spent 27% of each step loading and the sentence read "69% of the lower"."""
    profile = make_profile({256: 7834.0}, {0: 22034.0, 2: 18000.0})
    best = reaching(5399.0, batch_size=256, num_workers=0)
    at = predict_configs(profile, [best.config])
    step_at, loader_at = float(at.step_samples_per_s[0]), float(at.loader_samples_per_s[0])
    in_turn = 1.0 / (1.0 / step_at + 1.0 / loader_at)
    assert 0.9 < 5399.0 / in_turn < 1.0  # as the job measured: near what the two reach in turn
    slower = TrialView(Config(batch_size=64, num_workers=2), "ok", samples_per_s=3486.0)
    sentence = ceiling_sentence(profile, best, [slower])
    assert sentence is not None
    assert "of the lower" not in sentence
    assert (
        f"= {5399.0 / in_turn:.0%} of the {in_turn:,.0f} they reach in turn "
        "(without workers the main process loads each batch, then steps on it)"
    ) in sentence
    assert (
        f"loading in the main process takes {step_at / (step_at + loader_at):.0%} of each "
        "step, and workers did not win it back here" in sentence
    )
    assert "(num_workers=2, batch 64) trained at 3,486 samples/s" in sentence
    assert "sharing the cores with the step" in sentence  # a CPU
    # No trial with workers measured: the sentence says what workers would do, not a figure.
    alone = ceiling_sentence(profile, best)
    assert alone is not None and "would take it off the training thread" in alone
    # One measured faster in its single run is quoted without the verdict.
    faster = TrialView(Config(batch_size=256, num_workers=2), "ok", samples_per_s=5600.0)
    quoted = ceiling_sentence(profile, best, [faster])
    assert quoted is not None and "did not win it back" not in quoted
    assert "trained at 5,600 samples/s in one run" in quoted
    # With workers the lower of the two bounds is still the ceiling.
    with_workers = ceiling_sentence(profile, reaching(5399.0, batch_size=256, num_workers=2))
    assert with_workers is not None and "of the lower" in with_workers
    assert "in turn" not in with_workers


#: The loader alone on an NVIDIA H200 (text-transformer, 2026-11-26), at batch 32: handing a
#: batch between processes costs per batch, so more workers hardly helped and larger batches do.
H200_TOKENS_LOADER = {0: 16003.9, 1: 5874.3, 2: 11966.6, 4: 18579.8, 8: 16681.9, 16: 17526.4}


def test_the_loader_is_predicted_through_both_batch_sizes_it_was_timed_at() -> None:
    profile = make_profile({512: 74260.6}, H200_TOKENS_LOADER, device_type="cuda")
    again = LoaderPoint(num_workers=4, samples_per_s=52000.0, cpu_s_per_sample=1e-5)
    profile = profile.model_copy(
        update={"loader_large_batch_size": 256, "loader_large_batch": again}
    )
    at = predict_configs(profile, [Config(batch_size=b, num_workers=4) for b in (32, 256, 512)])
    assert at.loader_samples_per_s[0] == pytest.approx(18579.8)
    assert at.loader_samples_per_s[1] == pytest.approx(52000.0)
    # Beyond the larger batch the fixed part's share keeps shrinking: faster still.
    assert at.loader_samples_per_s[2] > 52000.0
    # A loader slower per sample at the larger batch has no fixed part: never below zero.
    slower = profile.model_copy(
        update={"loader_large_batch": again.model_copy(update={"samples_per_s": 15000.0})}
    )
    at = predict_configs(slower, [Config(batch_size=b, num_workers=4) for b in (256, 512)])
    assert np.all(at.loader_samples_per_s > 0) and np.all(np.isfinite(at.loader_samples_per_s))


#: The loader alone on an NVIDIA H200 (text-transformer, 2026-11-27 02:05 UTC) at batch 32,
#: the main process's CPU seconds per batch received beside each, and 16 workers again at
#: batch 96 (91,019 samples/s, 0.78 ms a batch received).
H200_TOKENS_SWEEP = {
    1: (8975.8, 7.26e-4),
    2: (19287.9, 5.17e-4),
    4: (31534.0, 6.23e-4),
    8: (34980.9, 6.03e-4),
    16: (37834.7, 5.45e-4),
    32: (36224.4, 5.53e-4),
}


def test_a_main_process_ceiling_is_not_taken_for_every_workers_cost() -> None:
    """16 workers were bound by the main process's receiving (a cost per batch), 1 to 4 by the
    workers' own work (mostly per sample). Trials at batch 512 with 4 workers and bf16 trained
    at 36,411-44,535 samples/s (confirmation rounds); the step alone reached 79,256 there.
    Taking the 16 workers' split for every count predicted those trials at 64,738 (the loader
    alone at 176,862)."""
    profile = make_profile({512: 79256.0}, {0: 15407.1}, device_type="cuda")
    loader = [
        LoaderPoint(
            num_workers=w, samples_per_s=r, cpu_s_per_sample=1e-4, main_cpu_s_per_batch=main
        )
        for w, (r, main) in H200_TOKENS_SWEEP.items()
    ]
    again = LoaderPoint(
        num_workers=16, samples_per_s=91019.3, cpu_s_per_sample=6e-5, main_cpu_s_per_batch=7.81e-4
    )
    profile = profile.model_copy(
        update={
            "loader": [*profile.loader, *loader],
            "loader_large_batch_size": 96,
            "loader_large_batch": again,
        }
    )
    at = predict_configs(
        profile,
        [
            Config(
                batch_size=512,
                num_workers=4,
                pin_memory=True,
                persistent_workers=True,
                prefetch_factor=2,
            ),
            Config(batch_size=96, num_workers=16),
        ],
    )
    assert 36411.0 / 1.15 <= at.samples_per_s[0] <= 44535.0 / 0.85, at.samples_per_s[0]
    assert at.loader_samples_per_s[1] == pytest.approx(91019.3, rel=0.01)


#: slow-storage's loader alone on a 2-core Intel Xeon (2026-11-27 03:08 UTC) at batch 32:
#: sleeping reads, a cost per sample. One worker read 229 samples/s at batch 32 and 232 at 256.
XEON_SLOW_STORAGE = {
    1: 228.9,
    2: 453.4,
    4: 894.1,
    8: 1838.2,
    16: 3665.2,
    24: 4744.1,
    32: 7656.0,
    48: 8967.4,
}


def test_a_measured_workers_split_outweighs_a_noisy_ceiling_pair() -> None:
    """24 workers read 4,744 samples/s at batch 32 (below the trend of 16 and 32 workers) and
    6,534 at 64: taken as a worker's split, that pair made a batch cost 89 ms whatever its
    size, and batch 64 with 48 workers was predicted at 8,529 samples/s where trials trained at
    5,925-6,170. One worker, timed at both batches, reads per sample."""
    profile = make_profile({64: 1e6}, XEON_SLOW_STORAGE)
    one = LoaderPoint(num_workers=1, samples_per_s=231.6, cpu_s_per_sample=2e-4)
    noisy = LoaderPoint(num_workers=24, samples_per_s=6534.2, cpu_s_per_sample=1e-4)
    profile = profile.model_copy(
        update={
            "loader_fewest_workers_batch_size": 256,
            "loader_fewest_workers": one,
            "loader_large_batch_size": 64,
            "loader_large_batch": noisy,
        }
    )
    at = predict_configs(profile, [Config(batch_size=b, num_workers=48) for b in (32, 64)])
    assert at.loader_samples_per_s[0] == pytest.approx(8967.4)
    assert at.loader_samples_per_s[1] == pytest.approx(8967.4, rel=0.05)
    # Without the measured split the pair decides, as before: larger batches look cheaper.
    guessed = profile.model_copy(update={"loader_fewest_workers": None})
    assert (
        predict_configs(guessed, [Config(batch_size=64, num_workers=48)]).loader_samples_per_s[0]
        > 1.2 * 8967.4
    )


def test_the_wait_that_one_batch_ahead_costs_grows_with_the_workers_ahead_in_the_round() -> None:
    """24 workers timed with two batches ahead read 1.2x the same count with one ahead: a
    worker waits for the main process to take the batches before its own, so the wait grows
    with the count: one worker barely gains from a second batch ahead, 48 as much as 24.
    Configurations with one ahead keep the sweep's figures; without the timing (older
    profiles) every prefetch factor is predicted alike."""
    older = make_profile({32: 1e6}, XEON_SLOW_STORAGE)
    swept = XEON_SLOW_STORAGE[24]
    ahead = LoaderPoint(
        num_workers=24, samples_per_s=1.2 * swept, cpu_s_per_sample=1e-4, prefetch_factor=2
    )
    paired_one = LoaderPoint(num_workers=24, samples_per_s=swept, cpu_s_per_sample=1e-4)
    profile = older.model_copy(update={"loader_prefetch": ahead, "loader_one_ahead": paired_one})
    configs = [
        Config(batch_size=32, num_workers=w, prefetch_factor=f)
        for w in (1, 12, 24, 48)
        for f in (1, 2)
    ]
    at = predict_configs(profile, configs).loader_samples_per_s
    before = predict_configs(older, configs).loader_samples_per_s
    one, one_ahead, count_12, count_12_ahead, count_24, count_24_ahead, count_48, count_48_ahead = (
        at
    )
    assert list(at[::2]) == pytest.approx(list(before[::2]))
    assert list(before[1::2]) == pytest.approx(list(before[::2]))
    assert count_24_ahead / count_24 == pytest.approx(1.2)
    assert 1.0 < one_ahead / one < 1.01
    assert count_48_ahead / count_48 == pytest.approx(1.2)
    assert 1.0 < count_12_ahead / count_12 < 1.2
    # The gain comes from the pair, not from the sweep's point (timed seconds apart, which
    # can read low or high): a pair 1.1x apart gives 1.1x at the count timed, on the sweep's
    # rate there, whichever way the two read apart.
    for sweep_share in (1.0 / 1.1, 1.1):
        paired = profile.model_copy(
            update={
                "loader_one_ahead": LoaderPoint(
                    num_workers=24,
                    samples_per_s=sweep_share * 1.2 * swept / 1.1,
                    cpu_s_per_sample=1e-4,
                ),
                "loader_prefetch": ahead.model_copy(
                    update={"samples_per_s": sweep_share * 1.2 * swept}
                ),
            }
        )
        at_paired = predict_configs(paired, configs).loader_samples_per_s
        assert at_paired[4] == pytest.approx(count_24)
        assert at_paired[5] / at_paired[4] == pytest.approx(1.1)
    # A second batch ahead that was no faster predicts no gain (never a loss).
    slower = profile.model_copy(
        update={"loader_prefetch": ahead.model_copy(update={"samples_per_s": 0.9 * swept})}
    )
    assert list(predict_configs(slower, configs).loader_samples_per_s) == pytest.approx(
        list(before)
    )


def test_the_share_of_the_ceiling_compares_bounds_at_the_recommendations_batch() -> None:
    """The step's best is at batch 512, the loader's at batch 32: their minimum is not what a
    configuration at batch 512 can reach (the H200 run read "212% of min(74,261, 18,580)")."""
    again = LoaderPoint(num_workers=4, samples_per_s=52000.0, cpu_s_per_sample=1e-5)
    profile = make_profile(
        {32: 4752.1, 512: 74260.6}, H200_TOKENS_LOADER, device_type="cuda"
    ).model_copy(update={"loader_large_batch_size": 256, "loader_large_batch": again})
    sentence = ceiling_sentence(profile, reaching(39322.0, batch_size=512, num_workers=4))
    assert sentence is not None
    assert (
        "18,580 samples/s with 4 workers at batch 32 (52,000 at batch 256 with 4 "
        "workers)" in sentence
    )
    share = int(sentence.split("= ")[1].split("%")[0])
    assert 50 <= share <= 100, sentence
    assert "At the recommendation's batch 512" in sentence
    assert "underestimates" not in sentence
    # Without the larger batch (older profiles) the same run reads above the predicted bound,
    # and the sentence says what that means.
    older = profile.model_copy(update={"loader_large_batch_size": None, "loader_large_batch": None})
    sentence = ceiling_sentence(older, reaching(39322.0, batch_size=512, num_workers=4))
    assert sentence is not None and "of the lower: the profile underestimates" in sentence


#: The step alone on an NVIDIA H200 (image-cnn, fp32, 2026-11-26): samples/s per batch.
H200_STEP = {
    8: 3544.6,
    16: 6887.0,
    32: 14560.5,
    64: 27459.9,
    128: 57020.9,
    192: 79416.0,
    256: 88629.6,
}


def test_a_step_whose_time_hardly_grows_with_the_batch_is_named_launch_bound_on_cuda() -> None:
    fast_loader = {0: 200.0, 16: 1e6}
    sentence = ceiling_sentence(
        make_profile(H200_STEP, fast_loader, device_type="cuda"), reaching(8e4, batch_size=256)
    )
    assert sentence is not None
    assert "2.3 ms at batch 8, 2.9 ms at 256" in sentence and "CUDA graphs" in sentence
    # A step whose time grows with its batch (image-cnn on a 2-core CPU) gets the usual advice.
    cpu_like = {8: 1005.8, 32: 1578.0, 96: 1733.8}
    for device_type in ("cuda", "cpu"):
        sentence = ceiling_sentence(
            make_profile(cpu_like, fast_loader, device_type=device_type),
            reaching(1500.0, batch_size=96),
        )
        assert sentence is not None and "kernel launches" not in sentence
        assert "step bounds it" in sentence


def compile_space() -> SearchSpace:
    """A small space of the token workload on a CPU that compiles: compile off and default."""
    device = CPU.model_copy(update={"compile_unavailable": None})
    space = SearchSpace(
        device,
        TOKENS,
        fixed={"amp": "off", "intra_op_threads": None},
        ranges={"batch_size": "32,64,128", "num_workers": "0,2", "prefetch_factor": "1,2"},
    )
    assert space.choices["compile"][:2] == ("off", "default")
    return space


def test_the_most_uncertain_seeds_each_explore_knobs_no_other_seed_does() -> None:
    # Each uncertain seed turns knobs away from what the profile ran that no other does. A
    # profile that did not time compile seeds no compiled configuration at all: an untimed
    # compile is paid in full before a trial learns anything (see test_seed_compile).
    space = compile_space()
    profile = make_profile({32: 1000.0, 64: 2000.0, 128: 2500.0}, {0: 1e5, 2: 2e5})
    predictions = predict_space(profile, space)
    index_of = {space.config_from(predictions.values(i)).key(): i for i in range(len(predictions))}
    seeds = seed_configs(predictions, space, 20, [space.baseline()])
    uncertain = seeds[3:]  # after the three predicted best
    assert len(uncertain) == 2
    assert not any(seed.compile != "off" for seed in seeds)
    first, second = (predictions.uncovered_knobs(index_of[seed.key()]) for seed in uncertain)
    assert first and not first & second


def test_a_configuration_is_too_slow_only_under_a_third_of_the_best_measured() -> None:
    profile = make_profile({32: 1000.0, 64: 2000.0}, {0: 1e5})
    space = small_space(ranges={"batch_size": "32,64"}, fixed={"num_workers": 0})
    predictor = Predictor(profile, space, None)
    config = Config(batch_size=32)
    predicted = predictor.samples_per_s(config)
    assert predicted is not None
    assert predicted_too_slow(predictor, config, 2.9 * predicted) is None
    reason = predicted_too_slow(predictor, config, 3.1 * predicted)
    assert reason is not None and f"{predicted:,.1f}" in reason
    # Where the best measured ran far above its own prediction, the bar is that prediction:
    # batch 64 predicted at 2,000 (under three times batch 32's) though measured at 3.1x 32's.
    best_config = Config(batch_size=64)
    assert predicted_too_slow(predictor, config, 3.1 * predicted, best_config=best_config) is None
    assert (
        predicted_too_slow(
            predictor, Config(batch_size=8), 3.1 * predicted, best_config=best_config
        )
        is not None
    )


def test_a_neighbour_is_out_of_reach_only_under_the_best_at_twice_its_uncertainty() -> None:
    profile = make_profile({32: 1000.0, 64: 2000.0}, {0: 1e5})
    space = small_space(ranges={"batch_size": "32,64"}, fixed={"num_workers": 0})
    predictor = Predictor(profile, space, None)
    neighbour, best_config = Config(batch_size=32), Config(batch_size=64)
    predicted = predictor.samples_per_s(neighbour)
    reach = predictor.reach(neighbour)
    assert predicted is not None and reach is not None
    uncertainty = float(predict_configs(profile, [neighbour]).uncertainty[0])
    assert uncertainty > 0 and reach == pytest.approx(predicted * (1 + 2 * uncertainty))
    # Batch 64 predicted at 2,000: the bar is the lower of that and the best measured.
    best_predicted = predictor.samples_per_s(best_config)
    assert best_predicted is not None and best_predicted > 1.01 * reach
    assert below_reach(predictor, neighbour, 0.99 * reach, best_config) is None
    reason = below_reach(predictor, neighbour, 1.01 * reach, best_config)
    assert reason is not None and f"{reach:,.1f}" in reason
    # A best measured far above its own prediction: the prediction is the bar (the profile's
    # scale, which the neighbour's prediction shares). One the profile predicts no faster than
    # the neighbour leaves it in reach however fast it measured.
    assert below_reach(predictor, neighbour, 10 * best_predicted, best_config) is not None
    assert below_reach(predictor, neighbour, 10 * best_predicted, neighbour) is None


def test_a_compiled_configuration_is_charged_the_shortest_compile_measured() -> None:
    # The profile runs eagerly: a compiled configuration's prediction is its steady state, and
    # over a short run the compile time measured on its mode is what decides it.
    device = CPU.model_copy(update={"compile_unavailable": None})
    space = SearchSpace(
        device, TOKENS, fixed={"amp": "off", "num_workers": 0}, ranges={"batch_size": "32,64"}
    )
    predictor = Predictor(make_profile({32: 1000.0, 64: 2000.0}, {0: 1e5}), space, None)
    compiled = Config(batch_size=32, compile="default")
    predicted = predictor.samples_per_s(compiled)
    assert predicted is not None
    best = 2 * predicted  # the steady state alone is worth measuring beside it
    assert predicted_too_slow(predictor, compiled, best) is None
    # 10 s of training for the run; 30 s of compiling makes it a quarter of the steady state.
    run_samples = int(10 * predicted)
    reason = predicted_too_slow(predictor, compiled, best, 30.0, run_samples)
    assert reason is not None and "30.0 s of compiling" in reason
    assert predicted_too_slow(predictor, compiled, best, 1.0, run_samples) is None
    eager = Config(batch_size=32)  # nothing to charge an eager configuration
    assert predicted_too_slow(predictor, eager, best, 30.0, run_samples) is None


def _with_one_thread(profile: Profile, rates: dict[int, float]) -> Profile:
    """``profile`` with the step also timed on one intra-op thread at ``rates``."""
    points = [
        StepPoint(batch_size=b, amp="off", samples_per_s=r, cpu_cores=1.0, threads=1)
        for b, r in rates.items()
    ]
    return profile.model_copy(update={"step_threads": points})


def test_a_step_on_one_thread_is_predicted_from_the_ratio_the_profile_timed() -> None:
    # The step alone on 2 threads: 1,000 samples/s at batch 32, 4,000 at 256; on one thread
    # 700 and 2,200 (ratios 0.7 and 0.55).
    default = make_profile({32: 1000.0, 256: 4000.0}, {0: 1e6}, step_cores=2.0)
    profile = _with_one_thread(default, {32: 700.0, 256: 2200.0})
    configs = [Config(batch_size=b, intra_op_threads=t) for b in (32, 64, 256) for t in (None, 1)]
    predictions = predict_configs(profile, configs)
    step = dict(
        zip(
            [(c.batch_size, c.intra_op_threads) for c in configs],
            predictions.step_samples_per_s,
            strict=True,
        )
    )
    assert step[32, 1] == pytest.approx(700.0) and step[256, 1] == pytest.approx(2200.0)
    assert 0.55 < step[64, 1] / step[64, None] < 0.7  # between the two measured ratios
    unc = dict(
        zip(
            [(c.batch_size, c.intra_op_threads) for c in configs],
            predictions.uncertainty,
            strict=True,
        )
    )
    assert unc[32, 1] == unc[32, None] < unc[64, 1]
    # Without points of its own the share of the cores stands in, flagged as a guess.
    guessed = predict_configs(default, [Config(batch_size=32, intra_op_threads=1)])
    assert guessed.step_samples_per_s[0] == pytest.approx(500.0)
    assert guessed.uncertainty[0] > unc[64, 1]


def test_one_thread_is_read_against_the_default_curve_and_its_largest_batches() -> None:
    # As a 2-core EPYC's profile read image-cnn in bf16: the default's batch 48 timed in a
    # slow moment, between 32 and 64, and one thread there as fast as two. Read through the
    # curves (running medians of three: 1,550 / 1,853 at 24, 1,566 / 2,079 at 32, the edge's
    # 2,118 / 2,318 at 48), beyond batch 48 the median of those three holds (0.84), not the
    # one quotient of its raw windows (1.02).
    default = make_profile(
        {
            8: 879.0,
            16: 1273.0,
            24: 1853.0,
            32: 2318.0,
            48: 2079.0,
            64: 2905.0,
            96: 2271.0,
            128: 3462.0,
            192: 2566.0,
        },
        {0: 1e6},
        step_cores=2.0,
    )
    profile = _with_one_thread(default, {8: 960.0, 16: 1413.0, 24: 1566.0, 32: 1550.0, 48: 2118.0})
    configs = [Config(batch_size=b, intra_op_threads=t) for b in (48, 128) for t in (None, 1)]
    step = predict_configs(profile, configs).step_samples_per_s
    assert step[1] / step[0] == pytest.approx(2118.0 / 2318.0, rel=0.01)
    beyond = statistics.median([1550.0 / 1853.0, 1566.0 / 2079.0, 2118.0 / 2318.0])
    assert step[3] / step[2] == pytest.approx(beyond, rel=0.01)
    assert step[3] / step[2] < 0.9


def test_one_thread_costs_what_the_step_bounds_and_nothing_where_the_loader_does() -> None:
    profile = _with_one_thread(
        make_profile({32: 1e4}, {0: 1e5, 8: 1000.0}, step_cores=2.0), {32: 5000.0}
    )
    loader_bound = predict_configs(
        profile,
        [
            Config(batch_size=32, num_workers=8),
            Config(batch_size=32, num_workers=8, intra_op_threads=1),
        ],
    ).samples_per_s
    assert loader_bound[1] == pytest.approx(loader_bound[0], rel=0.02)
    step_bound = predict_configs(
        profile, [Config(batch_size=32), Config(batch_size=32, intra_op_threads=1)]
    ).samples_per_s
    assert step_bound[1] < 0.8 * step_bound[0]


def test_the_predicted_best_with_workers_is_seeded_on_each_thread_count_and_without() -> None:
    # Loader-bound: the profile cannot tell the two thread counts apart beside busy workers,
    # so the predicted best is queued on both, and without workers (on a CPU the step and the
    # workers share the cores) unless the profile puts that far below the best; a best
    # without workers is queued with its fastest worker count, under the same bar, where
    # its loading in turn holds it under the search's ceiling of its step alone.
    space = small_space(ranges={"batch_size": "32,64", "num_workers": "0,8"})
    assert space.searched["intra_op_threads"] == (None, 1)

    def loader_bound(without_workers: float) -> Profile:
        return _with_one_thread(
            make_profile({32: 1e4, 64: 1.5e4}, {0: without_workers, 8: 2000.0}, step_cores=2.0),
            {32: 6000.0, 64: 8000.0},
        )

    # The main process loads at 800 samples/s: predicted 0.39 of the best with workers.
    predictions = predict_space(loader_bound(800.0), space)
    best = ranking(predictions, space, 1)[0][0]
    assert best.num_workers == 8
    # A budget of 6 trials leaves room for one predicted best and no uncertain seed.
    seeds = seed_configs(predictions, space, 6, [space.baseline()])
    twin = best.model_copy(
        update={"intra_op_threads": 1 if best.intra_op_threads is None else None}
    )
    alone = best.model_copy(update={"num_workers": 0})
    assert [s.key() for s in seeds] == [best.key(), twin.key(), alone.key()]
    assert seeds[-1] == alone.normalized()
    # At 100 samples/s it is predicted at 0.05 of the best: under the bar a proposal of the
    # sampler must clear, so not measured either.
    predictions = predict_space(loader_bound(100.0), space)
    assert ranking(predictions, space, 1)[0][0] == best
    seeds = seed_configs(predictions, space, 6, [space.baseline()])
    assert [s.key() for s in seeds] == [best.key(), twin.key()]
    # A space without the choice of no workers has no such twin.
    eight = small_space(ranges={"batch_size": "32,64", "num_workers": "8"})
    seeds = seed_configs(predict_space(loader_bound(800.0), eight), eight, 6, [eight.baseline()])
    assert all(seed.num_workers == 8 for seed in seeds)
    step_bound = _with_one_thread(
        make_profile({32: 1e4, 64: 1.5e4}, {0: 1e6, 8: 500.0}, step_cores=2.0),
        {32: 6000.0, 64: 8000.0},
    )
    predictions = predict_space(step_bound, space)
    best = ranking(predictions, space, 1)[0][0]
    assert best.num_workers == 0 and best.intra_op_threads is None
    # Eight workers deliver 500 samples/s: 0.06 of the best, not measured.
    assert [s.key() for s in seed_configs(predictions, space, 6, [space.baseline()])] == [
        best.key()
    ]

    def step_first(loader_cpu: float) -> Profile:
        return _with_one_thread(
            make_profile(
                {32: 1e4, 64: 1.5e4}, {0: 1e6, 8: 6000.0}, step_cores=2.0, loader_cpu=loader_cpu
            ),
            {32: 6000.0, 64: 8000.0},
        )

    # At 6,000 they are predicted at 0.58 of it: only a trial tells whether the step shares
    # the cores with them better than it loads in turn, so the twin with workers is queued.
    # Loading a sample in the main process takes 100 us of CPU, a step 67 us at batch 64: the
    # best loads in turn at 0.57 of what its step reaches alone, which workers could hide.
    predictions = predict_space(step_first(1e-4), space)
    best, rate = ranking(predictions, space, 1)[0]
    assert best.num_workers == 0 and best.intra_op_threads is None
    assert rate < 0.6 * predictions.step_samples_per_s[predictions.best(1)[0]]
    seeds = seed_configs(predictions, space, 6, [space.baseline()])
    assert [s.key() for s in seeds[:1]] == [best.key()] and len(seeds) == 2
    assert seeds[1].num_workers == 8
    assert seeds[1].model_copy(update={"num_workers": 0}).normalized() == best
    assert predict_configs(step_first(1e-4), seeds[1:]).samples_per_s[0] > rate / 3
    # Loading takes 4 us of CPU a sample: the best reaches 0.97 of its step alone, and
    # workers hiding all of that loading would gain less than a trial's spread; predicted
    # above a third of the best, the twin with workers is still not queued.
    predictions = predict_space(step_first(4e-6), space)
    best, rate = ranking(predictions, space, 1)[0]
    assert best.num_workers == 0
    assert rate > 0.95 * predictions.step_samples_per_s[predictions.best(1)[0]]
    with_workers = best.model_copy(update={"num_workers": 8}).normalized()
    assert predict_configs(step_first(4e-6), [with_workers]).samples_per_s[0] > rate / 3
    assert [s.key() for s in seed_configs(predictions, space, 6, [space.baseline()])] == [
        best.key()
    ]


def test_a_precision_read_close_to_the_best_is_seeded_once_where_no_best_seed_runs_in_it() -> None:
    # A text-transformer profile read bf16 a few percent under fp32 in a slow moment: every
    # predicted best seed was fp32, and the job never measured bf16 (0.79x the others' pick).
    # Six trials: room for one predicted best and no uncertain seed, so only this rule adds.
    space = SearchSpace(
        CPU, TOKENS, ranges={"batch_size": "32,64,128", "num_workers": "0", "amp": "off,bf16"}
    )

    def seeds_with_bf16_at(share: float, trials: int = 6) -> list[tuple[str, int]]:
        fp32 = {32: 500.0, 64: 560.0, 128: 540.0}
        profile = make_profile(fp32, {0: 1e6})
        bf16 = [
            point.model_copy(
                update={"amp": "bf16", "samples_per_s": share * fp32[point.batch_size]}
            )
            for point in profile.step
        ]
        profile = profile.model_copy(update={"step": [*profile.step, *bf16]})
        seeds = seed_configs(predict_space(profile, space), space, trials, [space.baseline()])
        return [(seed.amp, seed.batch_size) for seed in seeds]

    assert seeds_with_bf16_at(0.95) == [("off", 64), ("bf16", 64)]
    assert seeds_with_bf16_at(1.05) == [("bf16", 64), ("off", 64)]
    # Read further behind than the profile's spread between precisions: not measured.
    assert seeds_with_bf16_at(0.8) == [("off", 64)]
    # With room for uncertain seeds it takes the place of one: no more trials.
    assert len(seeds_with_bf16_at(0.95, trials=12)) == len(seeds_with_bf16_at(0.8, trials=12))
    assert ("bf16", 64) in seeds_with_bf16_at(0.95, trials=12)


def test_the_predicted_best_that_keeps_the_effective_batch_is_seeded_for_the_drop_in_answer() -> (
    None
):
    # The step is fastest at large batches, so the predicted best seeds all change the
    # user's effective batch of 32; the drop-in answer needs a measured configuration whose
    # batch divides it, and the profile names the fastest of those (batch 32 beats 16).
    space = small_space(ranges={"batch_size": "16,32,64,128,256", "num_workers": "0,2"})
    profile = make_profile(
        {16: 200.0, 32: 300.0, 64: 500.0, 128: 700.0, 256: 800.0}, {0: 1e6, 2: 1e6}
    )
    predictions = predict_space(profile, space)
    baseline = space.baseline()
    assert baseline.effective_batch == 32
    without = seed_configs(predictions, space, 6, [baseline])
    assert without and all(32 % seed.batch_size for seed in without)
    seeds = seed_configs(predictions, space, 6, [baseline], keeping_batch=32)
    keepers = [seed for seed in seeds if 32 % seed.batch_size == 0]
    assert [seed.key() for seed in seeds[: len(without)]] == [seed.key() for seed in without]
    assert len(keepers) == 1 and keepers[0].batch_size == 32
    assert keepers[0].key() != baseline.key()
    # Where a predicted best already keeps it, no second keeper is spent on it.
    assert seed_configs(predictions, space, 6, [baseline], keeping_batch=256) == without


def test_a_thread_count_is_compared_with_the_threads_the_sweep_ran_on_not_the_cpus() -> None:
    # Eight cores of two threads each: PyTorch's default is 8 of 16 CPUs. Eight threads is
    # that default, not half of the machine; four is half of it.
    profile = make_profile({32: 1000.0}, {0: 1e6}, step_cores=8.0).model_copy(
        update={"cpu_count": 16, "default_threads": 8}
    )
    default, eight, four = predict_configs(
        profile,
        [
            Config(batch_size=32),
            Config(batch_size=32, intra_op_threads=8),
            Config(batch_size=32, intra_op_threads=4),
        ],
    ).step_samples_per_s
    assert eight == pytest.approx(default)
    assert four == pytest.approx(default / 2)


def test_one_worker_beside_a_step_on_every_core_adds_its_cpu_time_to_the_step() -> None:
    # The step's two threads meet at the end of each parallel region: a worker that takes one
    # of their cores delays both. On a 2-core CPU, image-cnn at batch 192 with one worker on
    # PyTorch's threads measured 0.74 of the cores' share the predictor gave it.
    step_s, worker_s = 1 / 1000, 8e-4
    profile = _with_one_thread(
        make_profile({32: 1000.0}, {0: 1e6, 1: 1e6, 2: 1e6}, step_cores=2.0, loader_cpu=worker_s),
        {32: 600.0},
    )
    receive_s = 1e-5 / 32
    predicted = predict_configs(
        profile,
        [
            Config(batch_size=32, num_workers=1),
            Config(batch_size=32, num_workers=2),
            Config(batch_size=32, num_workers=1, intra_op_threads=1),
        ],
    )
    one, two, one_thread = predicted.samples_per_s
    assert one == pytest.approx(1 / (step_s + receive_s + worker_s), rel=0.01)
    assert predicted.bound_name(0) == "cpu"
    # Two workers run beside both threads at once: each delays the step by half its time.
    assert two == pytest.approx(1 / (step_s + receive_s + worker_s / 2), rel=0.03)
    # On one thread the worker has the other core to itself: the step alone bounds it.
    assert one_thread == pytest.approx(1 / (1 / 600 + receive_s), rel=0.02)
    assert predicted.bound_name(2) == "step"
    assert one_thread > one


def test_workers_that_fit_on_the_core_a_step_on_fewer_threads_leaves_cost_it_nothing() -> None:
    # A step on one thread of two cores leaves the other core to the workers.
    profile = _with_one_thread(
        make_profile({32: 1000.0}, {0: 1e6, 1: 1e6}, step_cores=2.0, loader_cpu=5e-4), {32: 700.0}
    )
    light = predict_configs(profile, [Config(batch_size=32, num_workers=1, intra_op_threads=1)])
    assert light.bound_name(0) == "step"
    heavy = predict_configs(
        _with_one_thread(
            make_profile({32: 1000.0}, {0: 1e6, 1: 1e6}, step_cores=2.0, loader_cpu=4e-3),
            {32: 700.0},
        ),
        [Config(batch_size=32, num_workers=1, intra_op_threads=1)],
    )
    step_s = 1 / 700 + 1e-5 / 32
    # t = a + (b - 1 t) / 1
    assert heavy.samples_per_s[0] == pytest.approx(2 / (step_s + 4e-3), rel=0.01)
    assert heavy.bound_name(0) == "cpu"


def test_the_moments_a_busy_steps_threads_wait_give_the_workers_nothing() -> None:
    # Two threads step at 1,000 samples/s and on one thread at 720: their work fills 1.39
    # cores, the rest is the threads waiting for each other, a fraction of a millisecond at a
    # time. A worker woken into such a gap keeps the core past it: on a 2-core Xeon, eight
    # image-cnn workers loading an epoch's batches at its start cost the step half their CPU
    # time (2,999 samples/s measured, 3,045 predicted so; 3,590 where the gaps were counted).
    step_s, worker_s = 1 / 1000 + 1e-5 / 32, 3e-4  # the step receives each batch too

    def beside_step(delay_s: float) -> float:
        # The slowed step, and the soft minimum of it with the step alone.
        slowed, alone = 1 / (step_s + delay_s), 1 / step_s
        return float((slowed**-SOFT_MIN_POWER + alone**-SOFT_MIN_POWER) ** (-1 / SOFT_MIN_POWER))

    for step_cores in (2.0, 1.2):  # however busy the step's threads read
        timed = make_profile(
            {32: 1000.0},
            {0: 1e6, 1: 1e6, 2: 1e6, 4: 1e6},
            step_cores=step_cores,
            loader_cpu=worker_s,
        )
        one, two, four = predict_configs(
            _with_one_thread(timed, {32: 720.0}),
            [Config(batch_size=32, num_workers=w) for w in (1, 2, 4)],
        ).samples_per_s
        assert one == pytest.approx(beside_step(worker_s), rel=0.01)
        # Beside two workers (or more: one per thread at a time) half of it.
        assert two == pytest.approx(beside_step(worker_s / 2), rel=0.01)
        assert four == pytest.approx(two, rel=1e-6)
    # A delay within the prediction's own uncertainty leaves the step named the bound.
    light = make_profile({32: 1000.0}, {0: 1e6, 2: 1e6}, step_cores=2.0, loader_cpu=1e-5)
    assert predict_configs(light, [Config(batch_size=32, num_workers=2)]).bound_name(0) == "step"


def test_workers_ahead_of_the_step_load_one_at_a_time_but_at_an_epochs_start() -> None:
    profile = make_profile({128: 1000.0}, {2: 8000.0}, dataset_length=4096)
    configs = [
        Config(batch_size=128, num_workers=3, prefetch_factor=1),  # 3 of 32 ahead
        Config(batch_size=128, num_workers=8, prefetch_factor=2),  # 16 of 32
        Config(batch_size=128, num_workers=2, prefetch_factor=16),  # the whole epoch
        Config(batch_size=128, num_workers=2),
    ]  # PyTorch's 2 ahead
    columns = Columns.of(configs)
    assert loaded_at_once(profile, columns).tolist() == [3 / 32, 0.5, 1.0, 4 / 32]
    unknown = profile.model_copy(update={"dataset_length": None})
    assert loaded_at_once(unknown, columns).tolist() == [1.0] * 4


def recorded_interleaved_ratios(name: str) -> dict[str, float]:
    """Measured (the median of its interleaved runs) / predicted of each configuration a
    recorded job's profile was measured against after it, by batch, workers and prefetch."""
    recorded = json.loads((RECORDED / name).read_text())
    profile = Profile.model_validate(recorded["profile"])
    arms: dict[str, list[float]] = {}
    for run in recorded["interleaved_runs"]:
        arms.setdefault(Config.model_validate(run["config"]).key(), []).append(run["samples_per_s"])
    configs = {key: Config.model_validate(json.loads(key)) for key in arms}
    predicted = predict_configs(profile, list(configs.values())).samples_per_s
    return {
        configs[key].model_dump_json(
            include={"batch_size", "num_workers", "prefetch_factor"}
        ): float(np.median(arms[key])) / rate
        for key, rate in zip(configs, predicted, strict=True)
    }


def test_a_recorded_image_cnn_profile_predicts_workers_ahead_of_the_step() -> None:
    """A default image-cnn job on a 2-core EPYC and six configurations measured after it
    (tests/recorded/): three workers holding 3 of an epoch's 32 batches trained at 910-951
    samples/s, two holding all 32 at 1,161-1,216; both were predicted at 1,281-1,285 while
    every worker was taken to load at once. The job's 24 trials were predicted 35% from their
    measurements (median), one within 0.85-1.15. Those six read 0.94-1.10 of their
    predictions while the moments a busy step's threads wait counted as the workers' time,
    and read 0.96-1.21 since they do not (a 2-core Xeon's nine configurations, below, read
    0.79-1.10 before and 0.88-1.09 after): on this EPYC the workers beside batches of 384
    cost the step less than their CPU time, an under-prediction the job's scale of its trials
    takes up (its 24 trials: 16 within the band before, 18 after)."""
    ratios = recorded_interleaved_ratios("image_cnn_workers_ahead.json")
    assert all(0.85 <= ratio <= 1.25 for ratio in ratios.values()), ratios
    three_one_ahead = ratios['{"batch_size":128,"num_workers":3,"prefetch_factor":1}']
    two_whole_epoch = ratios['{"batch_size":128,"num_workers":2,"prefetch_factor":16}']
    # Measured at 928 and 1,209 samples/s: predicted in that order, each within the band.
    assert 0.85 <= three_one_ahead <= 1.15 and 0.85 <= two_whole_epoch <= 1.15
    recorded = json.loads((RECORDED / "image_cnn_workers_ahead.json").read_text())
    profile = Profile.model_validate(recorded["profile"])
    runs = recorded["runs"]
    predicted = predict_configs(profile, [Config.model_validate(r["config"]) for r in runs])
    job = np.array([r["samples_per_s"] for r in runs]) / predicted.samples_per_s
    assert float(np.median(np.abs(np.log(job)))) < 0.12, job
    assert np.sum((job >= 0.85) & (job <= 1.15)) >= 12, job


def test_a_recorded_image_cnn_profile_predicts_small_batches_beside_workers() -> None:
    """A default image-cnn job on a 2-core Xeon and nine configurations measured after it
    (tests/recorded/): at the workload's batch 32 one to eight workers refilling the queue
    trained at 2,295-2,686 samples/s, below the 3,184 without workers, and were predicted at
    2,710-2,907 (0.79-0.99) while the 0.08-0.15 cores the busy step left idle counted as the
    workers'; eight loading an epoch's batches at its start at 2,999, predicted at 3,590 with
    the moments the step's threads wait counted. Batches 128 and 256 read 0.94-1.10 while
    the loader's CPU time a sample was batch 32's at every batch, and 0.91-1.09 at the 0.67
    of it that one worker's two batch sizes put on batch 256. The job's 23 trials: 0.74-1.17
    before (18 within 0.85-1.15), 0.83-1.10 after (21)."""
    ratios = recorded_interleaved_ratios("image_cnn_small_batches_xeon.json")
    assert all(0.85 <= ratio <= 1.15 for ratio in ratios.values()), ratios
    runs = recorded_ratios("image_cnn_small_batches_xeon.json", "runs")
    assert float(np.median(np.abs(np.log(runs)))) < 0.1, runs
    assert np.sum((runs >= 0.85) & (runs <= 1.15)) >= 20, runs
