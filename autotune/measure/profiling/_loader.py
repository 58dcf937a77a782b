"""The loader sweep: the DataLoader alone, its batches only pulled, for a rising number of workers.

The DataLoader is built as a trial builds it and its batches are pulled, never copied or used,
so the sweep reads what the loader can deliver apart from the step. It times a geometric subset
of the searched worker counts, then goes beyond the grid while the loader keeps scaling and the
CPU and memory allow; a count that reads no gain while cores stand idle is timed again beside
the best, since a slow spell can outlast two counts. :func:`_measure_loader` is the one timing
every loader measurement shares.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

import psutil
from torch.utils.data import DataLoader, IterableDataset

from autotune.measure._distributed import world_size
from autotune.measure._host_memory import tree_memory_bytes
from autotune.measure._loop import _loader_length, build_loader
from autotune.measure.profiling._cpu_time import _cpu_seconds, own_descendants
from autotune.measure.profiling._lockstep import LOADER, conductor
from autotune.measure.profiling._plan import MEMORY_MARGIN, ProfilePlan
from autotune.predict import LoaderPoint
from autotune.space import Config
from autotune.workload import Workload

#: Timed window of one worker count: long enough for whole rounds of many workers' batches.
LOADER_WINDOW_S = 0.5
#: Batches each worker holds ahead in the loader sweep: one, so the start-up backlog to skip is
#: one round of workers.
SWEEP_PREFETCH = 1
#: A worker count must deliver this much more than the best fewer workers did to count as
#: scaling; the sweep beyond the grid stops after two counts that do not.
SCALING_GAIN = 1.10
#: The extended sweep stops once the loader keeps this share of the cores busy: more workers
#: could only share them.
CPU_SATURATION = 0.9
#: Share of the proportional gain (the worker ratio) a count must reach for the loader to count
#: as still scaling whatever the CPU reads: the CPU-busy stop is then not trusted.
PROPORTIONAL_SHARE = 0.5
#: Worker counts tried beyond the searched grid (the grid's own values above its cap first):
#: loaders that wait on storage keep scaling far past the core count.
EXTENDED_WORKERS = (24, 32, 48, 64, 96, 128, 192, 256)

_EPOCH_END = object()


def _measure_loader(
    workload: Workload,
    dataset: Any,
    batch_size: int,
    workers: int,
    prefetch_factor: int = SWEEP_PREFETCH,
) -> LoaderPoint:
    """Pull batches of a fresh loader with ``workers`` workers, each ``prefetch_factor``
    batches ahead; time the steady state."""
    config = Config(
        batch_size=batch_size,
        num_workers=workers,
        prefetch_factor=prefetch_factor if workers else None,
    )
    conducting = conductor()
    if conducting is not None:  # every rank times the same loader on its shard, at once
        conducting.send(LOADER, batch_size, workers, prefetch_factor)
    loader: DataLoader[Any] = build_loader(workload, config, dataset)
    process = psutil.Process()
    length = _loader_length(loader)
    # Starting the workers, as every epoch does again without persistent workers. (Their
    # shutdown here would wait for batches in flight, which an epoch's end does not have.)
    start = time.perf_counter()
    iterator: Iterator[Any] = iter(loader)
    restart = time.perf_counter() - start
    pulled = 0
    try:
        # The workers' start-up backlog (prefetch_factor batches each) is not steady state.
        warmup = workers * (config.prefetch_factor or 0) + 1
        for _ in range(warmup):
            if next(iterator, _EPOCH_END) is _EPOCH_END:
                break  # too short an epoch: reported below, as nothing was timed
        # The clock starts as the last warm-up batch arrives: the workers read on while the
        # CPU times below are taken, and reading many workers' times can take a fifth of a
        # one-round window that a clock started after it would miss (evidence:
        # benchmarks/log/).
        started = time.perf_counter()
        cpu_before = _cpu_seconds(process, children=True)
        # The main thread's own CPU clock: fine-grained, where the process's CPU times count
        # in ticks of 10 ms (a short window's batches would read nothing or a whole tick).
        main_before = time.thread_time()
        # The window ends before the epoch does: the last batch would shut the workers down
        # before their CPU time is read, and a new epoch would time their restart.
        left = None if length is None else _whole_rounds(length - warmup - 1, workers)
        while left is None or pulled < left:
            try:
                next(iterator)
            except StopIteration:
                break
            pulled += 1
            if (
                pulled >= max(2, workers)
                and pulled % max(1, workers) == 0
                and time.perf_counter() - started >= LOADER_WINDOW_S
            ):
                break
        wall = time.perf_counter() - started
        cpu = max(0.0, _cpu_seconds(process, children=True) - cpu_before)
        main_cpu = max(0.0, time.thread_time() - main_before)
        memory = tree_memory_bytes(
            os.getpid(), [os.getpid(), *(p.pid for p in own_descendants(process))]
        )
    finally:
        del iterator
    if conducting is not None:
        conducting.settle()
    if not pulled:
        raise RuntimeError(
            f"an epoch holds too few batches of {batch_size} to time "
            f"{workers} workers; give the dataset more samples"
        )
    samples = pulled * batch_size
    return LoaderPoint(
        num_workers=workers,
        samples_per_s=samples / wall,
        prefetch_factor=prefetch_factor if workers else None,
        cpu_s_per_sample=cpu / samples,
        main_cpu_s_per_batch=main_cpu / pulled if workers else None,
        memory_bytes=memory,
        restart_s=restart if workers else None,
    )


def _whole_rounds(batches: int, workers: int) -> int:
    """The most of ``batches`` that make whole rounds of ``workers`` (all of them where they
    make less than one round, or without workers).

    Workers deliver in turn, and started together they finish their batches together, so
    batches arrive in bursts a round apart: a window of a round and a half reads the burst it
    ends on as if it had taken no time, and can read above what the workers can deliver at
    all. Timed from one batch to the batch a whole number of rounds later, every worker
    delivered the same number of batches in it.
    """
    if workers < 1 or batches < workers:
        return batches
    return batches - batches % workers


def _next_counts(grid: Sequence[int]) -> list[int]:
    top = max(grid)
    return [w for w in EXTENDED_WORKERS if w > top]


def profile_loader(
    workload: Workload, dataset: Any, plan: ProfilePlan, cpu_count: int
) -> list[LoaderPoint]:
    """Loader points for the grid's worker counts, then beyond while it keeps scaling.

    The sweep ends once two counts in a row brought no gain of :data:`SCALING_GAIN` (the rest
    of the grid is predicted as that plateau): one count alone can read low and would cap the
    search below the counts that scale. Beyond the grid it also ends once the workers keep the
    CPU busy, the next count's memory would not fit the budget, or time is up.

    A count that leaves cores idle yet reads no gain is timed again right after the best count
    is (see :func:`_retimed`): the gain is judged on that back-to-back pair, and each keeps the
    faster of its windows. A slow spell of the machine can outlast two counts, and a sweep
    ended by one leaves the search a fraction of the rate more workers reach (evidence:
    benchmarks/log/).
    """
    length = dataset_length(dataset)
    started = time.perf_counter()
    points: list[LoaderPoint] = []
    flat = 0
    grid = sorted(set(plan.worker_counts))
    # A geometric subset of the grid (0, 1, 2, 4, 8, ... and its top): the counts between are
    # interpolated, which leaves time to look beyond the grid.
    measured = [w for w in grid if w <= 1 or w & (w - 1) == 0 or w == grid[-1]]
    beyond_grid = _next_counts(grid) if plan.extend_workers else []
    for workers in [*measured, *beyond_grid]:
        if time.perf_counter() - started >= plan.loader_budget_s or flat >= 2:
            break
        if length is not None and (2 * workers + 3) * plan.loader_batch_size > length:
            break  # an epoch holds too few batches to time that many workers
        if points and _loader_saturated(points, cpu_count, workers, plan):
            break
        point = _measure_loader(workload, dataset, plan.loader_batch_size, workers)
        best = max(points, key=lambda p: p.samples_per_s, default=None)
        gained = best is None or point.samples_per_s > SCALING_GAIN * best.samples_per_s
        if (
            not gained
            and workers >= 2
            and best is not None
            and best.num_workers
            and not _cores_busy(point, cpu_count)
        ):
            again, point, gained = _retimed(workload, dataset, plan.loader_batch_size, best, point)
            points[points.index(best)] = again
        flat = 0 if gained or workers < 2 else flat + 1
        points.append(point)
    return points


def _cores_busy(point: LoaderPoint, cpu_count: int) -> bool:
    """The loader kept :data:`CPU_SATURATION` of the cores busy: more workers could only
    share them, so a count without a gain is no slow spell."""
    return point.samples_per_s * point.cpu_s_per_sample >= CPU_SATURATION * cpu_count


def _retimed(
    workload: Workload, dataset: Any, batch_size: int, best: LoaderPoint, point: LoaderPoint
) -> tuple[LoaderPoint, LoaderPoint, bool]:
    """``best`` and ``point`` timed again, back to back (best first): each as the faster of
    its two windows (interference only ever slows a loader down), and whether ``point``
    gains on ``best``, in the new pair (a slow spell falls on both alike) or between the
    faster windows."""
    best_again = _measure_loader(workload, dataset, batch_size, best.num_workers)
    point_again = _measure_loader(workload, dataset, batch_size, point.num_workers)
    faster_best = max(best, best_again, key=lambda p: p.samples_per_s)
    faster_point = max(point, point_again, key=lambda p: p.samples_per_s)
    gained = (
        point_again.samples_per_s > SCALING_GAIN * best_again.samples_per_s
        or faster_point.samples_per_s > SCALING_GAIN * faster_best.samples_per_s
    )
    return faster_best, faster_point, gained


def _scaled_in_proportion(points: Sequence[LoaderPoint]) -> bool:
    """The last worker count gained at least half of what its share of workers promised over
    the count before (4x the workers, at least 2.5x the samples/s): a loader that scales so
    is not bound by the CPU, however busy the CPU reads (reads that wait hold workers, and
    their CPU time is spent, not needed)."""
    if len(points) < 2 or points[-2].num_workers == 0:
        return False
    before, last = points[-2], points[-1]
    promised = last.num_workers / before.num_workers
    return last.samples_per_s >= before.samples_per_s * (1 + PROPORTIONAL_SHARE * (promised - 1))


def _loader_saturated(
    points: Sequence[LoaderPoint], cpu_count: int, next_workers: int, plan: ProfilePlan
) -> bool:
    """More workers cannot help: the CPU is busy (and the last count did not scale in
    proportion), or their memory would pass the budget."""
    last = points[-1]
    if last.num_workers == 0:
        return False
    if (
        next_workers > last.num_workers
        and _cores_busy(last, cpu_count)
        and next_workers > cpu_count
        and not _scaled_in_proportion(points)
    ):
        return True
    budget = plan.memory_budget_bytes
    if budget is None or last.memory_bytes is None:
        return False
    # What each worker adds (the slope over the counts measured; with one count, its
    # process's share): the main process's own memory (the model, the step's batches) is
    # not multiplied by the workers.
    per_worker = worker_memory(points) or last.memory_bytes / (last.num_workers + 1)
    expected = last.memory_bytes + per_worker * (next_workers - last.num_workers)
    return expected > MEMORY_MARGIN * budget


def worker_memory(points: Sequence[LoaderPoint]) -> int:
    """Memory one worker adds: the slope between the smallest and largest worker counts."""
    measured = [p for p in points if p.memory_bytes is not None]
    if len(measured) < 2:
        return 0
    low, high = measured[0], measured[-1]
    if high.num_workers == low.num_workers:
        return 0
    slope = ((high.memory_bytes or 0) - (low.memory_bytes or 0)) / (
        high.num_workers - low.num_workers
    )
    return max(0, int(slope))


def extended_workers(points: Sequence[LoaderPoint], grid_max: int) -> list[int]:
    """Worker counts beyond ``grid_max`` up to the loader's best: worth searching."""
    if not points:
        return []
    best = max(points, key=lambda p: p.samples_per_s)
    return [p.num_workers for p in points if grid_max < p.num_workers <= best.num_workers]


def dataset_length(dataset: Any) -> int | None:
    """``len(dataset)`` where it has one, one rank's shard of it in a profile of several
    (a :class:`~torch.utils.data.DistributedSampler`'s, rounded up): what bounds the batches
    a loader timing can pull."""
    if not hasattr(dataset, "__len__"):
        return None
    return -(-len(dataset) // world_size())


def epoch_length(dataset: Any) -> int | None:
    """Samples per epoch of a map-style dataset (one rank's shard); None for an iterable one
    (its workers each read what the dataset gives them: its epoch is not a count of batches
    shared out)."""
    return None if isinstance(dataset, IterableDataset) else dataset_length(dataset)
