"""The profile, measured in a real trial process on real workloads, and its place in a job."""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from conftest import rows

from autotune.measure import MeasurePlan, glibc_malloc
from autotune.measure.profiling import ProfilePlan
from autotune.measure.profiling._cpu_time import _cpu_seconds
from autotune.measure.profiling._host import fault_seconds
from autotune.measure.profiling._loader import (
    _loader_saturated,
    _measure_loader,
    extended_workers,
    profile_loader,
)
from autotune.measure.profiling._loader_followup import large_batch_size
from autotune.measure.profiling._step import profile_step
from autotune.measure.profiling._step_doubt import (
    doubtful,
    outpaced,
    outpaced_on_every_core,
    short_of_cores,
)
from autotune.measure.profiling._threads import profile_step_threads
from autotune.predict import LoaderPoint, Profile, StepPoint, predict_configs, predict_space
from autotune.recommend import ceiling_numbers
from autotune.runner import probe_workload, profile_workload, run_trial
from autotune.space import Config, SearchSpace
from autotune.store import Database, Job
from autotune.tuner import TuneOptions, create_job, run_job
from autotune.tuner._profiling import profile_plan
from autotune.tuner._seeding import seed_configs
from autotune.workload import load_workload
from autotune.workload.builtins._slow_storage import SlowStorageDataset
from tests.conftest import FAST
from tests.workloads.slow_default_optimizer import OPTIMIZER_S as SLOW_DEFAULT_S
from tests.workloads.slow_optimizer import OPTIMIZER_S
from tests.workloads.stalled_start import STEP_S

FAST_FLAGS = [
    "--min-seconds",
    "0.3",
    "--min-steps",
    "3",
    "--warmup-steps",
    "1",
    "--confirm-top",
    "1",
    "--confirm-rounds",
    "1",
    "--fix",
    "compile=off",
]


def profiled(
    workload: str, seconds: float, budget: int | None = None, **space_options: object
) -> tuple[Profile, SearchSpace]:
    probe = probe_workload(workload, "cpu")
    space = SearchSpace(probe.device, probe.workload, **space_options)  # type: ignore[arg-type]
    plan = profile_plan(space, budget, host_budget=True, seconds=seconds)
    return profile_workload(workload, "cpu", plan, 180, memory_budget_bytes=budget), space


@pytest.mark.slow
def test_the_loader_sweep_goes_past_the_grid_only_where_the_space_takes_its_counts() -> None:
    """A range or a fixed value of num_workers is the user's: the job never searches a count
    past it (see SearchSpace.extra_workers), so the profile does not spend seconds timing one
    (a suite's text-transformer profile with workers 0,2 timed 24 workers three times)."""
    probe = probe_workload("builtin:slow-storage", "cpu")
    for options, extends in (
        ({}, True),
        ({"ranges": {"num_workers": "0..8"}}, False),
        ({"fixed": {"num_workers": 4}}, False),
    ):
        space = SearchSpace(probe.device, probe.workload, **options)  # type: ignore[arg-type]
        plan = profile_plan(space, None, host_budget=True, seconds=20)
        assert plan.extend_workers is extends, options
        assert SearchSpace(
            probe.device, probe.workload, extra_workers=[48], **options
        ).extra_workers == ((48,) if extends else ()), options


@pytest.mark.slow
def test_slow_storage_loader_scales_past_the_grid_and_the_step_is_far_faster() -> None:
    profile, space = profiled("builtin:slow-storage", 30)
    grid_top = profile.grid_max_workers
    assert grid_top == max(space.choices["num_workers"])
    assert profile.extra_workers and min(profile.extra_workers) > grid_top
    loader, step = profile.best_loader(), profile.best_step()
    assert loader is not None and step is not None
    assert loader.num_workers > grid_top, "the sleeping reads keep scaling past the grid"
    assert (step.samples_per_s or 0) > 2 * loader.samples_per_s
    # The job would search the extended counts.
    extended = SearchSpace(space.device, space.workload, extra_workers=profile.extra_workers)
    assert set(profile.extra_workers) <= set(extended.choices["num_workers"])
    # What an epoch holds and what starting its workers costs, for the epoch model.
    assert profile.dataset_length == space.workload.dataset_length
    restarts = {p.num_workers: p.restart_s for p in profile.loader}
    assert restarts[0] is None
    assert all(s is not None and s > 0 for w, s in restarts.items() if w)
    # What the training thread pays per batch beside its step: receiving it (timed on the
    # thread's own clock, finer than the process's 10 ms ticks) and copying it.
    assert all(p.main_cpu_s_per_batch for p in profile.loader if p.num_workers)
    assert all(p.copy_s is not None for p in profile.step if p.samples_per_s)


@pytest.mark.slow
def test_a_compute_heavy_workload_is_bound_by_its_step(workload_file) -> None:
    profile, space = profiled(workload_file("compute_heavy"), 10)
    loader, step = profile.best_loader(), profile.best_step()
    assert loader is not None and step is not None
    assert (step.samples_per_s or 0) < loader.samples_per_s
    assert not profile.extra_workers
    predictions = predict_space(profile, space)
    best = predictions.best(1)[0]
    assert predictions.bound_name(best) in ("step", "cpu")
    if "intra_op_threads" in space.searched:  # a CPU of two cores or more
        assert profile.step_threads and {p.threads for p in profile.step_threads} == {1}
        assert "step_threads" in profile.public_dict()


def test_the_step_is_timed_again_on_the_spaces_other_thread_counts(workload_file) -> None:
    workload = load_workload(workload_file("compute_heavy"))
    plan = ProfilePlan(
        batch_sizes=[8, 16, 32],
        amp_modes=["off"],
        channels_last=[False],
        worker_counts=[0],
        loader_batch_size=8,
        step_budget_s=2,
        intra_op_threads=[1, 2],
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # PyTorch's default on a 2-core machine, wherever this runs
    try:
        points, source = profile_step(workload, workload.dataset(), torch.device("cpu"), plan)
        again = profile_step_threads(workload, torch.device("cpu"), source, points, plan)
        assert torch.get_num_threads() == 2  # the profile's own threads are given back
    finally:
        torch.set_num_threads(threads)
    # Only the count that differs from the default, from the smallest batch up; each point
    # ran on one thread (its CPU time per wall second says so).
    assert again and {p.threads for p in again} == {1}
    assert [p.batch_size for p in again] == [8, 16, 32][: len(again)]
    assert all(p.samples_per_s and p.cpu_cores is not None and p.cpu_cores < 1.3 for p in again)


@pytest.mark.slow
def test_the_memory_model_predicts_which_batches_break_the_budget(workload_file) -> None:
    budget = 600 * 2**20
    profile, space = profiled(
        workload_file("memory_hog"),
        10,
        budget,
        fixed={"num_workers": 0, "amp": "off"},
        ranges={"batch_size": "8..512"},
    )
    # The sweep stops before a batch predicted over the budget (or when its time is up).
    assert all((p.peak_memory_bytes or 0) <= budget for p in profile.step)
    # Measured with freed memory retained (the space holds the knob): each point's peak starts
    # from a trimmed heap, not from the earlier points' retained buffers.
    assert profile.retained_freed_memory is glibc_malloc()
    model = profile.memory_model("off", False)
    assert model is not None and model.per_sample_bytes >= 2**20 * 0.5  # 1 MiB samples
    predictions = predict_space(profile, space, budget)
    over = {
        int(b)
        for b, o in zip(predictions.columns.batch_size, predictions.over_memory, strict=True)
        if o
    }
    assert 512 in over and 8 not in over
    seeds = seed_configs(predictions, space, 20, [space.baseline(), space.checklist()])
    assert seeds and all(config.batch_size not in over for config in seeds)


@pytest.mark.slow
@pytest.mark.skipif(not glibc_malloc(), reason="glibc's malloc (Linux) hands freed memory back")
def test_the_step_is_timed_in_a_fresh_heap_before_the_sweep_retains_freed_memory() -> None:
    """A trial with glibc's defaults faults in the pages its last step freed, thousands a
    step; the profile's one process, retaining freed memory, none. The profile times the
    difference first, and the prediction scales glibc's configurations by it."""
    profile, _ = profiled(
        "builtin:image-cnn",
        6,
        fixed={"num_workers": 0, "amp": "off"},
        ranges={"batch_size": "32,64"},
    )
    assert profile.retained_freed_memory
    (heap,) = profile.fresh_heap
    assert (heap.amp, heap.batch_size) == ("off", profile.loader_batch_size)
    assert heap.faults_per_step > 100, heap
    assert heap.retained_faults_per_step < heap.faults_per_step / 10, heap
    # The faults a step takes beyond retained memory's, each at what one cost this process:
    # below 1 however the two windows' times fell (they read 1.00 in one profile of four).
    assert heap.fault_s is not None and 1e-8 < heap.fault_s < 1e-3, heap
    assert heap.timed_ratio is not None and 0 < heap.timed_ratio <= 1, heap
    assert 0 < heap.ratio < 1, heap
    default, retained = predict_configs(
        profile, [Config(batch_size=64), Config(batch_size=64, retain_freed_memory=True)]
    ).step_samples_per_s
    assert default == pytest.approx(heap.ratio * retained, rel=0.01)  # + receiving, copying
    assert profile.public_dict()["fresh_heap"] == [heap.model_dump()]


@pytest.mark.slow
def test_a_fork_is_timed_at_the_pages_the_next_step_copies(workload_file) -> None:
    """A step that writes a 384 MiB buffer it keeps copies each of its pages after a fork
    (workers started at an epoch's start share them copy-on-write): the profile counts those
    faults and times them, where the space holds workers started anew each epoch and retained
    freed memory, and nowhere else."""
    path = workload_file("written_heap")
    profile, _ = profiled(
        path,
        4,
        fixed={"amp": "off", "retain_freed_memory": True},
        ranges={"batch_size": "8,16", "num_workers": "0,1"},
    )
    point = profile.fork_copy
    assert point is not None and (point.amp, point.batch_size) == ("off", 8), point
    scratch_pages = 384 * 2**20 // mmap.PAGESIZE
    assert point.faults >= 0.9 * scratch_pages, point
    assert 1e-7 < point.fault_s < 1e-3, point
    persistent, _ = profiled(
        path,
        4,
        fixed={"amp": "off", "retain_freed_memory": True, "persistent_workers": True},
        ranges={"batch_size": "8,16", "num_workers": "0,1"},
    )
    assert persistent.fork_copy is None


@pytest.mark.slow
def test_the_optimizer_step_is_timed_alone_and_accumulation_is_predicted_as_it_trains(
    workload_file,
) -> None:
    """An optimizer step that takes 20 ms beside a forward and backward of a fraction of one:
    where the space holds batches that accumulate to the workload's batch of 32, the profile
    times the optimizer step alone (and the backward adding into kept gradients, here next to
    nothing), and a trial of batch 8 accumulating over four runs as much faster than batch 8
    alone as the prediction says. A space with no such batch does not time it."""
    path = workload_file("slow_optimizer")
    profile, _ = profiled(
        path, 4, fixed={"amp": "off", "num_workers": 0}, ranges={"batch_size": "8,16,32"}
    )
    point = profile.accumulation
    assert point is not None and (point.amp, point.batch_size) == ("off", 8), point
    assert OPTIMIZER_S <= point.optimizer_s < 1.5 * OPTIMIZER_S, point
    assert point.accumulate_s < 0.1 * OPTIMIZER_S, point
    configs = [Config(batch_size=8, grad_accum_steps=k) for k in (1, 4)]
    predicted = predict_configs(profile, configs).samples_per_s
    # The faster of two one-second windows each, as the profile keeps its faster: a sleep
    # that oversleeps on a shared machine only ever slows a window down.
    plan = MeasurePlan(**{**FAST, "min_seconds": 1.0})
    measured = [
        max(run_trial(path, config, "cpu", plan, 120).samples_per_s or 0.0 for _ in range(2))
        for config in configs
    ]
    assert all(measured), measured
    gain = measured[1] / measured[0]
    assert gain > 2.5, measured  # nearly all of a micro-step is the optimizer's
    # Without the term the prediction would say 1.0x. A 20 ms sleep on a shared 2-core VM
    # oversleeps by up to 5 ms a step (batch 8 alone trained at 321-388 samples/s where the
    # profile read 370), which moves the gain by up to a fifth.
    assert gain == pytest.approx(predicted[1] / predicted[0], rel=0.25), (measured, predicted)
    larger, _ = profiled(
        path, 4, fixed={"amp": "off", "num_workers": 0}, ranges={"batch_size": "32,64"}
    )
    assert larger.accumulation is None


def test_a_page_fault_is_timed_at_microseconds_not_at_the_mapping() -> None:
    """The probe divides the time to write fresh pages by the faults that took: each page is
    mapped and zeroed on its first write (a fraction of a microsecond to a few for a 4 KiB
    page, 2.2-2.9 us on a 2-core EPYC VM; up to a few hundred where transparent huge pages
    zero 2 MiB a fault), never the mmap call alone."""
    cost = fault_seconds()
    assert cost is not None and 5e-8 < cost < 1e-3, cost


def autotune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_a_profiled_job_stores_predicts_seeds_and_explains(tmp_path: Path, workload_file) -> None:
    db, out = str(tmp_path / "p.db"), tmp_path / "best.json"
    result = autotune(
        "run",
        workload_file("tiny"),
        "--trials",
        "6",
        "--db",
        db,
        "--out",
        str(out),
        "--device",
        "cpu",
        "--profile-seconds",
        "6",
        *FAST_FLAGS,
    )
    assert result.returncode == 0, result.stderr
    (stored,) = rows(db, "select profile from autotune_jobs")
    profile = Profile.model_validate_json(str(stored[0]))
    assert profile.step and profile.loader
    # On Linux the probe sees glibc, so the space holds retained memory and the profile ran
    # with it (the step sweep's heap is then the one such a trial has).
    assert profile.retained_freed_memory is glibc_malloc()
    phases = [phase for (phase,) in rows(db, "select phase from autotune_trials order by number")]
    assert "predicted" in phases
    predicted = rows(db, "select predicted_samples_per_s from autotune_trials")
    assert all(value is not None and value > 0 for (value,) in predicted)
    assert_scales_come_from_the_runs_before(db)
    document = json.loads(out.read_text())
    assert document["profile"]["step"] and document["profile"]["loader"]
    assert "Ceiling: the step alone reaches" in document["diagnosis"]
    searched = document["search_space"]["searched"]
    assert ("retain_freed_memory" in searched) is glibc_malloc()
    assert document["profile"]["retained_freed_memory"] is glibc_malloc()
    assert bool(document["profile"]["fresh_heap"]) is glibc_malloc()
    assert "profile (" in result.stderr

    # A resumed job reuses the stored profile: nothing is measured again.
    marker = profile.model_copy(update={"duration_s": 12345.0})
    database = Database(f"sqlite:///{db}")
    options = TuneOptions(
        workload=workload_file("tiny"),
        n_trials=3,
        device="cpu",
        min_seconds=0.3,
        min_steps=3,
        warmup_steps=1,
        confirm_top=1,
        confirm_rounds=1,
        profile_seconds=6,
    )
    job_id = create_job(database, options, status="running")
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.profile = marker.model_dump(mode="json")
    finished = run_job(database, job_id)
    assert finished.status == "succeeded"
    assert finished.profile is not None and finished.profile["duration_s"] == 12345.0
    assert finished.recommendation is not None
    assert finished.recommendation["profile"]["duration_s"] == 12345.0


def assert_scales_come_from_the_runs_before(db: str) -> None:
    """Each trial's stored scale is the median measured / predicted of the usable runs of other
    configurations before it, among those with its handling of freed memory and, within it,
    with or without workers as it (see ``ScaleClass``): of the first such group that has any,
    else of all; the first trial has none."""
    trials = rows(
        db,
        "select config_key, config, samples_per_s, predicted_samples_per_s, "
        "prediction_scale, outcome, pruned from autotune_trials order by number",
    )
    assert trials[0][4] is None
    before: list[tuple[str, tuple[bool, bool], float]] = []
    for key, config, measured, predicted, scale, outcome, pruned in trials:
        values = json.loads(str(config))
        kind = (values["retain_freed_memory"], values["num_workers"] == 0)
        others = [(other_kind, ratio) for other, other_kind, ratio in before if other != key]
        same_kind = [ratio for other_kind, ratio in others if other_kind == kind]
        same_heap = [ratio for other_kind, ratio in others if other_kind[0] == kind[0]]
        pooled = [ratio for _, ratio in others]
        if pooled:
            assert scale == pytest.approx(statistics.median(same_kind or same_heap or pooled)), key
        else:
            assert scale is None
        if outcome == "ok" and not pruned and measured:
            before.append((key, kind, measured / predicted))
    assert any(scale is not None for *_, scale, _, _ in trials)


@pytest.mark.slow
def test_no_profile_runs_the_plain_search(tmp_path: Path, workload_file) -> None:
    db, out = str(tmp_path / "n.db"), tmp_path / "best.json"
    result = autotune(
        "run",
        workload_file("tiny"),
        "--trials",
        "4",
        "--db",
        db,
        "--out",
        str(out),
        "--device",
        "cpu",
        "--no-profile",
        *FAST_FLAGS,
    )
    assert result.returncode == 0, result.stderr
    assert rows(db, "select profile from autotune_jobs") == [(None,)]
    assert rows(db, "select count(*) from autotune_trials where phase = 'predicted'") == [(0,)]
    assert rows(
        db, "select count(*) from autotune_trials where predicted_samples_per_s is not null"
    ) == [(0,)]
    document = json.loads(out.read_text())
    assert document["profile"] is None
    assert "Ceiling" not in document["diagnosis"]


@pytest.mark.slow
def test_a_loader_whose_cost_is_per_batch_is_predicted_at_a_batch_it_did_not_time(
    workload_file,
) -> None:
    """Collating costs 10 ms a batch whatever its size: timed at batch 8 alone, the loader
    would be predicted at 8 samples' worth of throughput at every batch (seen on an H200:
    18,580 samples/s at batch 32, a trial at batch 512 trained at 39,322)."""
    path = workload_file("batch_overhead")
    profile, _ = profiled(
        path, 8, fixed={"amp": "off"}, ranges={"batch_size": "8..64", "num_workers": "1,2"}
    )
    assert profile.loader_batch_size == 8
    # The user's range bounds the sweep: a count beyond it could never be searched.
    assert {p.num_workers for p in profile.loader} == {1, 2}
    assert profile.extra_workers == []
    assert profile.loader_large_batch_size == 64
    assert profile.loader_large_batch is not None
    best = profile.best_loader()
    assert best is not None and profile.loader_large_batch.num_workers == best.num_workers
    # The fewest workers were timed at a larger batch too: a worker's own split.
    assert profile.loader_fewest_workers_batch_size == 64
    assert profile.loader_fewest_workers is not None
    assert profile.loader_fewest_workers.num_workers == 1
    workload = load_workload(path)
    # Scaled per sample from batch 8, the loader would be predicted 3-4x too slow at batch 32
    # (10 ms a batch of 8 or of 32). The band leaves room for a shared machine's drift between
    # the profile and this timing: 1.27x on a 2-core Xeon VM whose speed moved by a third for
    # minutes at a time (benchmarks/log/2026-11.md, 2026-11-27), where 1.25 was the band.
    # The fastest of three windows: a busy machine only slows a window of sleeping workers (in
    # a full test run on a 2-core Xeon one window read 1,607 samples/s with one worker, half of
    # what 10 ms a batch of 32 allows, against a prediction of 2,660; 2026-11-29).
    for workers, band in ((1, 1.5), (2, 1.5)):
        measured = max(
            _measure_loader(workload, workload.dataset(), 32, workers).samples_per_s
            for _ in range(3)
        )
        at = predict_configs(profile, [Config(batch_size=32, num_workers=workers)])
        predicted = float(at.loader_samples_per_s[0])
        assert measured / band <= predicted <= band * measured, (workers, predicted, measured)


def test_a_loader_window_of_a_round_and_a_half_does_not_read_above_what_its_workers_can_do() -> (
    None
):
    """Four workers whose every read sleeps 10 ms deliver at most 400 samples/s. Started
    together they deliver in bursts a round apart; an epoch that leaves a round and a half
    after the warm-up, timed to its last batch, read 476-548 (1.37x) before the window was
    cut to whole rounds. The bound is one-sided: a busy machine only slows the workers down."""
    workers, batch, latency = 4, 16, 0.01
    warmup = workers + 1  # the sweep's one batch ahead per worker, and one
    dataset = SlowStorageDataset(batch * (warmup + 1 + workers * 3 // 2), latency)
    workload = load_workload("builtin:slow-storage")
    rates = [_measure_loader(workload, dataset, batch, workers).samples_per_s for _ in range(3)]
    assert max(rates) <= 1.05 * workers / latency, rates


@pytest.mark.slow
def test_batches_ahead_are_timed_where_uneven_reads_make_workers_wait(workload_file) -> None:
    """One read in four takes 10x the others. With one batch ahead per worker (the sweep's) a
    worker that has delivered waits until the batches before its own, a slow one among them,
    are taken; with PyTorch's default of two it reads on. The profile times the fastest count
    both ways, and the predictor gives the difference to configurations with more ahead."""
    # Eight workers: in simulated rounds of these reads two ahead gain 1.33x over one.
    profile, _ = profiled(
        workload_file("uneven_reads"),
        8,
        fixed={"amp": "off", "num_workers": 8},
        ranges={"batch_size": "8,16"},
    )
    ahead = profile.loader_prefetch
    assert ahead is not None and ahead.prefetch_factor == 2
    swept = profile.loader_one_ahead  # the same count with one ahead, timed right before
    assert swept is not None and swept.prefetch_factor == 1
    assert swept.num_workers == ahead.num_workers
    assert ahead.num_workers == 8
    assert ahead.samples_per_s > 1.15 * swept.samples_per_s, (ahead, swept)
    configs = [
        Config(
            batch_size=profile.loader_batch_size,
            num_workers=ahead.num_workers,
            prefetch_factor=factor,
            retain_freed_memory=profile.retained_freed_memory,
        )
        for factor in (1, 2, 4)
    ]
    at = predict_configs(profile, configs)
    predicted_gain = at.loader_samples_per_s[1] / at.loader_samples_per_s[0]
    assert predicted_gain == pytest.approx(ahead.samples_per_s / swept.samples_per_s, rel=0.1)
    # Two ahead was timed; four was not, and stays less certain.
    assert at.uncovered_knobs(1) == frozenset()
    assert at.uncovered_knobs(2) == {"prefetch_factor"}
    numbers = ceiling_numbers(profile)
    assert (
        numbers is not None
        and (
            f"{ahead.samples_per_s:,.0f} with {ahead.num_workers} workers 2 batches ahead each, "
            f"{swept.samples_per_s:,.0f} with one"
        )
        in numbers
    )
    assert profile.public_dict()["loader_prefetch"] == {
        "prefetch_factor": 2,
        "num_workers": ahead.num_workers,
        "samples_per_s": ahead.samples_per_s,
        "one_ahead_samples_per_s": swept.samples_per_s,
    }


#: slow-storage's loader at batch 32 on a 2-core AMD EPYC (2026-11-27): 0-24 workers as a
#: profile timed them (24 read below 16), 32 and 48 the medians of three timings alone.
EPYC_SLOW_STORAGE = {
    0: 202.0,
    1: 204.0,
    2: 432.0,
    4: 869.0,
    8: 1717.0,
    16: 3640.0,
    24: 3547.0,
    32: 6553.0,
    48: 7895.0,
}


def _recorded_sweep(monkeypatch: pytest.MonkeyPatch, rates: dict[int, float]) -> list[int]:
    """The worker counts the loader sweep times when each reads as recorded in ``rates``."""

    def recorded(workload: object, dataset: object, batch_size: int, workers: int) -> LoaderPoint:
        return LoaderPoint(num_workers=workers, samples_per_s=rates[workers], cpu_s_per_sample=2e-4)

    monkeypatch.setattr("autotune.measure.profiling._loader._measure_loader", recorded)
    plan = ProfilePlan(
        batch_sizes=[32],
        amp_modes=["off"],
        channels_last=[False],
        worker_counts=[0, 1, 2, 4, 8, 16],
        loader_batch_size=32,
    )
    return [p.num_workers for p in profile_loader(None, list(range(4096)), plan, 2)]


def test_one_count_that_reads_low_does_not_end_the_sweep_beyond_the_grid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ended at 24 workers, the profile of a default slow-storage job capped the search at 16
    (3,382 samples/s recommended, where 48 workers reach 5,700-8,000); two counts in a row
    without a gain end it."""
    assert _recorded_sweep(monkeypatch, EPYC_SLOW_STORAGE) == [0, 1, 2, 4, 8, 16, 24, 32, 48]
    plateau = {**EPYC_SLOW_STORAGE, 32: 3700.0}
    assert _recorded_sweep(monkeypatch, plateau) == [0, 1, 2, 4, 8, 16, 24, 32]


#: slow-storage's loader at batch 32 on a 2-core Xeon (2026-11-27), per count in the order
#: timed: a default job's profile at 20:52 UTC, in a slow spell of the machine from 24 workers
#: on (24 and 32 read below 16), then the same profile run on its own at 21:18 UTC.
XEON_SLOW_SPELL = {
    0: [220.0],
    1: [218.0],
    2: [380.0],
    4: [891.0],
    8: [1809.0],
    16: [3467.0, 3660.0],
    24: [2870.0, 5441.0],
    32: [3244.0, 6920.0],
    48: [7665.0],
}


def test_a_count_read_in_a_slow_spell_is_timed_again_beside_the_best(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ended at 32 workers by two counts read in a slow spell, a default slow-storage job's
    profile capped its search at 16 workers, which trained at 0.53x of 48's rate. Timed again
    right after the best count, 24 workers gain on 16; each point keeps its faster window."""
    timed: list[int] = []

    def recorded(workload: object, dataset: object, batch_size: int, workers: int) -> LoaderPoint:
        rates = XEON_SLOW_SPELL[workers]
        rate = rates[min(timed.count(workers), len(rates) - 1)]
        timed.append(workers)
        return LoaderPoint(num_workers=workers, samples_per_s=rate, cpu_s_per_sample=2e-4)

    monkeypatch.setattr("autotune.measure.profiling._loader._measure_loader", recorded)
    plan = ProfilePlan(
        batch_sizes=[32],
        amp_modes=["off"],
        channels_last=[False],
        worker_counts=[0, 1, 2, 4, 8, 16],
        loader_batch_size=32,
    )
    points = profile_loader(None, list(range(4096)), plan, 2)
    assert [p.num_workers for p in points] == [0, 1, 2, 4, 8, 16, 24, 32, 48]
    # 24 read no gain and was timed again right after 16 (3,660 and 5,441: a gain in the
    # pair); so was 32 after 24.
    assert timed[:12] == [0, 1, 2, 4, 8, 16, 24, 16, 24, 32, 24, 32]
    rates = {p.num_workers: p.samples_per_s for p in points}
    assert rates[16] == 3660.0 and rates[24] == 5441.0 and rates[32] == 6920.0
    assert extended_workers(points, 16) == [24, 32, 48]


def test_a_loader_that_keeps_the_cores_busy_is_not_timed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A count that reads no gain with the cores busy is a plateau, not a slow spell."""
    timed: list[int] = []

    def busy(workload: object, dataset: object, batch_size: int, workers: int) -> LoaderPoint:
        timed.append(workers)
        rate = 1000.0 * min(workers, 2) or 900.0
        return LoaderPoint(num_workers=workers, samples_per_s=rate, cpu_s_per_sample=9e-4)

    monkeypatch.setattr("autotune.measure.profiling._loader._measure_loader", busy)
    plan = ProfilePlan(
        batch_sizes=[32],
        amp_modes=["off"],
        channels_last=[False],
        worker_counts=[0, 1, 2, 4, 8, 16],
        loader_batch_size=32,
    )
    profile_loader(None, list(range(4096)), plan, 2)
    # 4 workers gain nothing on 2 with the cores busy: no second window, and the busy CPU
    # ends the sweep there.
    assert timed == [0, 1, 2, 4]


def test_an_epoch_too_short_for_the_loaders_warm_up_is_a_clear_error(workload_file) -> None:
    # Two batches an epoch, three to warm two workers up: seen on an H200 as a bare
    # StopIteration from benchmarks.training_thread (image-cnn, batch 256, 16 workers).
    workload = load_workload(workload_file("batch_overhead"))
    with pytest.raises(RuntimeError, match="an epoch holds too few batches of 4096"):
        _measure_loader(workload, workload.dataset(), 4096, 2)


@pytest.mark.cuda
def test_a_cuda_profile_measures_device_memory_per_batch() -> None:
    probe = probe_workload("builtin:image-cnn", "cuda")
    space = SearchSpace(probe.device, probe.workload)
    plan = profile_plan(space, None, host_budget=False, seconds=20)
    profile = profile_workload("builtin:image-cnn", "cuda", plan, 300, budget_is_host_memory=False)
    assert all(p.cpu_cores is None for p in profile.step)
    assert any(m.per_sample_bytes > 0 for m in profile.memory)
    # Each batch's copy to the device is timed, and a larger batch copies longer.
    ran = sorted(
        (p for p in profile.step if p.samples_per_s and not p.channels_last),
        key=lambda p: p.batch_size,
    )
    assert all(p.copy_s and p.copy_s > 0 for p in ran)
    assert (ran[-1].copy_s or 0) > (ran[0].copy_s or 0)


def _point(
    workers: int,
    samples_per_s: float,
    cpu_s_per_sample: float = 1e-3,
    memory_bytes: int | None = None,
) -> LoaderPoint:
    return LoaderPoint(
        num_workers=workers,
        samples_per_s=samples_per_s,
        cpu_s_per_sample=cpu_s_per_sample,
        memory_bytes=memory_bytes,
    )


def _plan(budget: int | None = None) -> ProfilePlan:
    return ProfilePlan(
        batch_sizes=[32],
        amp_modes=["off"],
        channels_last=[False],
        worker_counts=[0, 2, 8, 48],
        loader_batch_size=32,
        memory_budget_bytes=budget,
    )


def test_a_loader_that_scales_with_its_workers_is_not_stopped_by_a_busy_cpu() -> None:
    # 8 workers read 1.8 of 2 cores busy; a stop there would predict 48 workers as 8.
    busy = 1.8 / 600
    scaling = [_point(2, 120, busy), _point(8, 600, busy)]  # 4x the workers, 5x the rate
    assert not _loader_saturated(scaling, 2, 48, _plan())
    flat = [_point(2, 500, busy), _point(8, 600, busy)]  # 4x the workers, 1.2x the rate
    assert _loader_saturated(flat, 2, 48, _plan())


def test_the_memory_stop_multiplies_what_a_worker_adds_not_the_main_process() -> None:
    gib = 2**30
    # A 1.5 GiB main process (model, batches) and 50 MiB per worker: 48 workers need ~3.9 GiB.
    points = [
        _point(0, 60, memory_bytes=int(1.5 * gib)),
        _point(8, 600, memory_bytes=int(1.5 * gib + 8 * 50 * 2**20)),
    ]
    assert not _loader_saturated(points, 2, 48, _plan(budget=8 * gib))
    assert _loader_saturated(points, 2, 48, _plan(budget=4 * gib))


def test_the_second_loader_batch_fits_the_epoch_the_bytes_and_the_budget() -> None:
    plan = ProfilePlan(
        batch_sizes=[16, 32, 64, 96, 128, 256, 512],
        amp_modes=["off"],
        channels_last=[False],
        worker_counts=[0, 16],
        loader_batch_size=32,
    )
    tokens, image = 2048, 3 * 224 * 224 * 4  # bytes a sample holds as batched
    sixteen = _point(16, 5000.0, memory_bytes=2**30)
    assert large_batch_size(plan, sixteen, None, tokens) == 256  # 8x the sweep's at most
    # An epoch must hold the warm-up and a window of the larger batches.
    assert large_batch_size(plan, sixteen, 35 * 128, tokens) == 128
    assert large_batch_size(plan, sixteen, 35 * 32, tokens) is None
    # 16 workers' 224x224 float images: batch 128 would hold 2.6 GB in flight.
    assert large_batch_size(plan, sixteen, None, image) == 96
    # And within the budget: 1 GiB held already, 2 GiB allowed.
    budgeted = ProfilePlan(**{**plan.__dict__, "memory_budget_bytes": 2 * 2**30})
    assert large_batch_size(budgeted, sixteen, None, image) is None
    assert large_batch_size(budgeted, sixteen, None, tokens) == 256
    # A slow loader's timing stays short: one slow-storage worker (231 samples/s) took 5.5 s
    # at batch 256; batch 64 is enough to split a batch's cost.
    one_slow = _point(1, 231.0)
    assert large_batch_size(plan, one_slow, None, tokens) == 64
    assert large_batch_size(plan, _point(1, 20.0), None, tokens) is None


def test_a_stall_during_the_first_sweep_does_not_reach_the_step_points(workload_file) -> None:
    """The machine runs the step at a third of its speed for half a second: the first sweep's
    small batches meet it, the second sweep does not, and every point keeps the faster."""
    workload = load_workload(workload_file("stalled_start"))
    plan = ProfilePlan(
        batch_sizes=[8, 16, 24, 32, 48, 64],
        amp_modes=["off"],
        channels_last=[False],
        worker_counts=[0],
        loader_batch_size=8,
        step_budget_s=10,
    )
    # One intra-op thread: a step that sleeps lets OpenMP's other thread fall asleep, and waking
    # it again costs milliseconds per step on some VMs (a 10 ms step read 16 ms with two threads
    # and 10.3 ms with one on a 2-vCPU Xeon VM), which would blur the speed this test knows.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        points, _ = profile_step(workload, workload.dataset(), torch.device("cpu"), plan)
    finally:
        torch.set_num_threads(threads)
    assert [p.batch_size for p in points] == plan.batch_sizes
    for point in points:
        unstalled = point.batch_size / STEP_S
        assert point.samples_per_s is not None
        assert 0.75 * unstalled < point.samples_per_s <= 1.05 * unstalled, point


def test_a_cpu_sweep_times_again_only_points_held_back_dipped_or_slowed() -> None:
    """text-transformer's fp32 and bf16 sweeps on a 2-core EPYC (2026-12-06): no point short of
    cores, none but fp32's smallest batch more than 3% under its neighbours, so one second
    window, the quickest; then the same sweep with one point on one core and one that dipped
    by half and recovered."""

    def sweep(rates: dict[int, tuple[float, float | None]]) -> list[StepPoint]:
        return [
            StepPoint(batch_size=b, amp="off", samples_per_s=r, cpu_cores=c)
            for b, (r, c) in rates.items()
        ]

    fp32 = sweep(
        {16: (342, 1.95), 32: (404, 1.97), 64: (460, 1.99), 128: (461, 1.97), 192: (455, 1.98)}
    )
    bf16 = sweep(
        {16: (407, 2.0), 32: (421, 2.02), 64: (467, 2.0), 128: (457, 1.92), 192: (528, 1.97)}
    )
    # The smallest batch under its one neighbour by more than a tenth (a rising curve's
    # smallest batch often is: timing it again is quick).
    assert doubtful(fp32) == fp32[:1] and doubtful(bf16) == []
    held = sweep(
        {16: (342, 1.95), 32: (250, 1.02), 64: (460, 1.99), 128: (230, 1.97), 192: (455, 1.98)}
    )
    assert [p.batch_size for p in doubtful(held)] == [32, 128]
    # A largest batch that ran clearly slower than the one before it is timed again.
    falling = sweep({16: (300, 2.0), 32: (400, 2.0), 64: (330, 2.0)})
    assert [p.batch_size for p in doubtful(falling)] == [16, 64]
    # A slow spell over the sweep's first batches: the curve only rises, too steeply (each of
    # batches 8-24 took 30 ms a step, batch 32 10 ms): each step that took longer than a larger
    # batch's is timed again, and the rising curve's last point is not.
    stalled = sweep(
        {
            8: (267, 1.0),
            16: (533, 1.0),
            24: (800, 1.0),
            32: (3200, 1.0),
            48: (4750, 1.0),
            64: (6300, 1.0),
        }
    )
    assert [p.batch_size for p in doubtful(stalled)] == [8, 16, 24]
    # An out-of-memory point is not timed again; on CUDA (no cores) every timed point is.
    oom = StepPoint(batch_size=256, amp="off", out_of_memory=True)
    assert doubtful([*bf16, oom]) == []
    cuda = sweep({16: (342, None), 32: (404, None)})
    assert doubtful([*cuda, oom]) == cuda


def test_a_precision_that_kept_fewer_cores_busy_than_another_is_named() -> None:
    """The profile of a default image-cnn job on a 2-core EPYC (2026-11-27): fp32 read
    160-420 samples/s on 1.0 core at batches 8-24, bf16 2,828-4,077 on 2.0."""

    def points(amp: str, rates: dict[int, tuple[float, float]]) -> list[StepPoint]:
        return [
            StepPoint(batch_size=b, amp=amp, samples_per_s=r, cpu_cores=c)
            for b, (r, c) in rates.items()
        ]

    fp32 = points("off", {8: (420.0, 1.01), 16: (160.0, 1.05), 24: (197.0, 1.04)})
    bf16 = points("bf16", {32: (2828.0, 1.95), 64: (3232.0, 2.0), 256: (4077.0, 1.98)})
    assert short_of_cores([*fp32, *bf16]) == [("off", False)]
    assert short_of_cores(bf16) == []  # one combination: nothing to compare with
    one_thread = points("off", {8: (420.0, 1.0)}) + points("bf16", {8: (500.0, 0.9)})
    assert short_of_cores(one_thread) == []  # no step kept more than a core busy


def test_a_precision_timed_while_a_core_was_taken_is_timed_again(workload_file) -> None:
    """A neighbour holds the step back for the profile's first seconds, through the whole first
    layout's share of the budget: that layout keeps a fraction of the cores busy, is timed
    again after the second, and reads near the second.

    Held, a step waits nine times its work: about a tenth of the speed and of the cores. Not
    timed again, the first layout reads there; timed again, it reads what the machine gives
    that second. Half is the bar: CI's shared 2-core machine once gave a retimed batch 32 1.33
    cores and 0.82 of the second layout's speed against 2.0 (a neighbour of its own)."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two CPUs: a step on one keeps one core busy whatever happens")
    workload = load_workload(workload_file("core_taken"))
    plan = ProfilePlan(
        batch_sizes=[8, 16, 32],
        amp_modes=["off"],
        channels_last=[False, True],
        worker_counts=[0],
        loader_batch_size=8,
        step_budget_s=8,
    )
    points, _ = profile_step(workload, workload.dataset(), torch.device("cpu"), plan)
    first = {p.batch_size: p for p in points if not p.channels_last}
    second = {p.batch_size: p for p in points if p.channels_last}
    # A loaded machine can spend the budget before the last batch: compare the batches both
    # layouts reached, at least two.
    both = set(first) & set(second)
    assert {8, 16} <= both, points
    assert all(p.samples_per_s and p.cpu_cores for p in points)
    assert min(p.cpu_cores or 0.0 for p in second.values()) > 1.2  # the step's own work
    for batch in sorted(both):
        held, free = first[batch], second[batch]
        assert (held.cpu_cores or 0.0) > 0.5 * (free.cpu_cores or 0.0), (held, free)
        assert (held.samples_per_s or 0.0) > 0.5 * (free.samples_per_s or 0.0), (held, free)


def test_a_precision_far_slower_at_the_smallest_batch_is_ruled_out_there() -> None:
    """text-transformer's profile on a 2-core EPYC without AVX-512 (2026-11-28, bf16 emulated):
    fp32 ran 233-406 samples/s at batches 8-64, bf16 17-18 at 8-24."""
    fp32 = [
        StepPoint(batch_size=b, amp="off", samples_per_s=r)
        for b, r in {8: 233.0, 16: 296.0, 24: 369.0, 64: 406.0}.items()
    ]
    bf16 = StepPoint(batch_size=8, amp="bf16", samples_per_s=18.0)
    assert outpaced([*fp32, bf16]) == {("bf16", False)}
    # A third of the other's speed or more (a slow spell halves a point), another batch, or
    # a second point: not ruled out.
    assert outpaced([*fp32, bf16.model_copy(update={"samples_per_s": 120.0})]) == set()
    assert outpaced([*fp32, bf16.model_copy(update={"batch_size": 32})]) == set()
    assert outpaced([*fp32, bf16, bf16.model_copy(update={"batch_size": 16})]) == set()


def test_an_outpaced_precision_short_of_cores_is_timed_again_only_if_the_cores_could_help() -> None:
    """text-transformer's profile on a 2-core EPYC without AVX-512 (2026-11-28): fp32 304-307
    samples/s at batches 16-64 on 2.0-2.1 cores, emulated bf16 18 at batch 16 on 1.3."""
    fp32 = [
        StepPoint(batch_size=b, amp="off", samples_per_s=r, cpu_cores=c)
        for b, (r, c) in {16: (304.0, 2.08), 32: (307.0, 1.98), 64: (269.0, 1.99)}.items()
    ]
    bf16 = StepPoint(batch_size=16, amp="bf16", samples_per_s=18.0, cpu_cores=1.32)
    assert short_of_cores([*fp32, bf16]) == [("bf16", False)]
    assert outpaced_on_every_core([*fp32, bf16]) == {("bf16", False)}
    # On one core of two, 80 samples/s could be 160 with both: over a third of fp32's 304.
    one_core = bf16.model_copy(update={"samples_per_s": 80.0, "cpu_cores": 1.0})
    assert outpaced([*fp32, one_core]) == {("bf16", False)}
    assert outpaced_on_every_core([*fp32, one_core]) == set()
    # Not outpaced: nothing to rule out, whatever its cores.
    assert (
        outpaced_on_every_core([*fp32, bf16.model_copy(update={"samples_per_s": 150.0})]) == set()
    )


@pytest.mark.slow
def test_a_layout_far_slower_is_timed_at_its_smallest_batch_only(workload_file) -> None:
    workload = load_workload(workload_file("slow_layout"))
    plan = ProfilePlan(
        batch_sizes=[8, 16, 32],
        amp_modes=["off"],
        channels_last=[False, True],
        worker_counts=[0],
        loader_batch_size=8,
        step_budget_s=3,
        intra_op_threads=[1, 2],
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        points, source = profile_step(workload, workload.dataset(), torch.device("cpu"), plan)
        again = profile_step_threads(workload, torch.device("cpu"), source, points, plan)
    finally:
        torch.set_num_threads(threads)
    assert [(p.channels_last, p.batch_size) for p in points] == [
        (False, 8),
        (False, 16),
        (False, 32),
        (True, 8),
    ]
    assert outpaced(points) == {("off", True)}
    assert again and {p.channels_last for p in again} == {False}


@pytest.mark.slow
def test_the_cpu_time_of_a_child_and_its_threads_is_read_finer_than_a_tick() -> None:
    """A child's CPU time, all its threads', in nanoseconds: a busy child read 3 ms apart
    gains about 3 ms, where the per-process times psutil reads count in ticks of 10 ms (a
    window that short would read 0 or 10 ms)."""
    burner = (
        "import threading\n"
        "def burn():\n"
        "    while True: pass\n"
        "threading.Thread(target=burn, daemon=True).start()\n"
        "burn()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", burner])
    try:
        me = psutil.Process()
        time.sleep(0.3)  # its interpreter started, its second thread running
        shares = []
        for _ in range(7):
            started = time.perf_counter()
            before = _cpu_seconds(me, children=True) - time.process_time()
            time.sleep(0.003)
            after = _cpu_seconds(me, children=True) - time.process_time()
            shares.append((after - before) / (time.perf_counter() - started))
        # Its two threads share the GIL: about one core's worth, as the machine gives it.
        assert 0.2 < statistics.median(shares) < 2.0, shares
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
def test_each_optimizer_implementation_is_timed_and_predicted_as_it_trains(
    workload_file,
) -> None:
    """An optimizer whose default implementation spins 100 ms a step and whose ``foreach`` one
    does not: the profile times the step with each implementation the probe found against the
    default at the workload's batch, the prediction takes the seconds saved off a larger
    batch's step (a smaller share of it than at the batch timed), and a trial with ``foreach``
    is faster, as predicted. A space without another implementation times none."""
    path = workload_file("slow_default_optimizer")
    fixed = {"amp": "off", "num_workers": 0}
    profile, _ = profiled(
        path, 4, fixed={**fixed, "optimizer_impl": "default"}, ranges={"batch_size": "32,128"}
    )
    assert profile.optimizer == []
    profile, space = profiled(path, 4, fixed=fixed, ranges={"batch_size": "32,128"})
    assert [p.impl for p in profile.optimizer] == [
        i for i in space.choices["optimizer_impl"] if i != "default"
    ]
    point = profile.optimizer_point("foreach")
    assert point is not None and (point.batch_size, point.amp) == (32, "off"), profile.optimizer
    # The spin, give or take what the machine's other work adds to either window.
    assert point.saved_s is not None and point.saved_s > 0.5 * SLOW_DEFAULT_S, point
    configs = [Config(batch_size=128, optimizer_impl=impl) for impl in ("default", "foreach")]
    predicted = predict_configs(profile, configs)
    assert predicted.uncovered_knobs(1) == frozenset()
    predicted_gain = float(predicted.step_samples_per_s[1] / predicted.step_samples_per_s[0])
    assert point.ratio is not None and 1.0 < predicted_gain < point.ratio, (predicted_gain, point)
    plan = MeasurePlan(**{**FAST, "min_seconds": 1.0})
    measured = [
        max(run_trial(path, config, "cpu", plan, 120).samples_per_s or 0.0 for _ in range(2))
        for config in configs
    ]
    # How much faster moves with how late a shared machine lets the spin end; that it is
    # faster does not.
    assert 0.0 < measured[0] < measured[1], measured


@pytest.mark.slow
def test_compile_is_timed_once_per_mode_within_its_allowance(workload_file) -> None:
    """Where one compile may take a share of the job, the profile compiles the model in each
    mode the space searches, with empty caches, and times the compiled step against the eager
    one; a compile over its allowance is abandoned, its allowance a lower bound of its
    seconds; without an allowance nothing compiles."""
    path = workload_file("tiny")
    probe = probe_workload(path, "cpu")
    space = SearchSpace(
        probe.device, probe.workload, fixed={"amp": "off", "num_workers": 0, "compile": "default"}
    )
    plan = profile_plan(space, None, True, 4, compile_budget_s=120.0, run_samples=10**9)
    assert list(plan.compile_modes) == ["default"]
    profile = profile_workload(path, "cpu", plan, 300)
    [point] = profile.compile
    assert (point.mode, point.batch_size, point.over_budget, point.error) == (
        "default",
        32,
        False,
        None,
    ), point
    assert 0.0 < point.compile_s < point.budget_s == 120.0, point
    assert point.ratio is not None and point.ratio > 0, point
    # A compile of this model takes seconds: held to a tenth of one, it is abandoned there.
    short = dataclasses.replace(plan, compile_budget_s=0.1)
    [over] = profile_workload(path, "cpu", short, 300).compile
    assert over.over_budget and over.compile_s == over.budget_s == 0.1 and over.ratio is None
    unplanned = profile_plan(space, None, True, 4)
    assert list(unplanned.compile_modes) == []
    assert profile_workload(path, "cpu", unplanned, 300).compile == []
