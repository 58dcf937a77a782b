"""The loader's follow-up timings after the sweep: a larger batch, and more batches ahead.

The sweep times every worker count at one batch size with one batch ahead per worker. Two of
its counts are then timed again at a larger batch of the space, which splits a batch's cost
into a part per sample and a part per batch (:func:`profile_large_batch`): in the main process
(the loader's ceiling) and in a worker. Its fastest count that fits the epoch is timed again
with one batch ahead and right after with PyTorch's default of two, whose gain tells how long a
worker waits for its batch to be taken (:func:`profile_prefetch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.measure.profiling._loader import (
    LOADER_WINDOW_S,
    SWEEP_PREFETCH,
    _measure_loader,
    dataset_length,
)
from autotune.measure.profiling._plan import MEMORY_MARGIN, ProfilePlan
from autotune.predict import LoaderPoint
from autotune.space import TORCH_DEFAULT_PREFETCH_FACTOR
from autotune.workload import Workload

#: The loader's second batch size is at most this multiple of the sweep's: handing a batch from
#: a worker to the main process costs per batch, not per sample, so a loader that plateaus at
#: the sweep's batch can deliver far more at a larger one (evidence: benchmarks/log/).
LARGE_BATCH_FACTOR = 8
#: Seconds the timing at the larger batch may be expected to take (at the sweep's rate): the
#: split needs two batch sizes, not the largest, and a slow loader at the largest batch would
#: spend a large share of the profile on one timing.
LARGE_BATCH_S = 2.0
#: Host bytes the larger batches in flight may hold (two per worker and the main process's),
#: with or without a memory budget: 224x224 float images with 16 workers stop at batch 96.
LARGE_BATCH_BYTES = 2 * 2**30
#: Batches ahead per worker of the loader's second timing at the sweep's batch: PyTorch's
#: default, since workers that wait for their batch to be taken train faster with two ahead,
#: which the sweep's one ahead alone cannot tell (evidence: benchmarks/log/).
AHEAD_PREFETCH = TORCH_DEFAULT_PREFETCH_FACTOR


def profile_large_batch(
    workload: Workload,
    dataset: Any,
    plan: ProfilePlan,
    points: Sequence[LoaderPoint],
    sample_bytes: int,
    fewest: bool = False,
) -> tuple[int, LoaderPoint] | None:
    """A worker count of the sweep timed again at a larger batch of the space (see
    :func:`large_batch_size`): with the two, the predictor splits a batch's cost into a part per
    sample and a part per batch. The fastest count whose epoch holds enough larger batches (the
    main process's share, the loader's ceiling), or with ``fewest`` the fewest workers (a
    worker's own share). None when no such batch fits."""
    with_workers = [p for p in points if p.num_workers]
    if fewest:
        with_workers = sorted(with_workers, key=lambda p: p.num_workers)[:1]
    length = dataset_length(dataset)
    for point in sorted(with_workers, key=lambda p: p.samples_per_s, reverse=True):
        batch = large_batch_size(plan, point, length, sample_bytes)
        if batch is None:
            continue
        try:
            return batch, _measure_loader(workload, dataset, batch, point.num_workers)
        except RuntimeError:
            return None
    return None


def profile_prefetch(
    workload: Workload,
    dataset: Any,
    plan: ProfilePlan,
    points: Sequence[LoaderPoint],
    sample_bytes: int,
) -> tuple[LoaderPoint, LoaderPoint] | None:
    """The fastest worker count of the sweep whose epoch holds enough batches, timed again
    with the sweep's one batch ahead per worker and then with :data:`AHEAD_PREFETCH`: with
    one ahead a worker that has delivered waits for the main process to take its batch, in
    order, before it is given the next (the predictor's wait per worker). The pair is timed
    back to back, not against the sweep's point, which can read well below the same count
    timed alone. None when no count fits the epoch or the memory budget."""
    length = dataset_length(dataset)
    batch = plan.loader_batch_size
    budget = plan.memory_budget_bytes
    for point in sorted(
        (p for p in points if p.num_workers), key=lambda p: p.samples_per_s, reverse=True
    ):
        workers = point.num_workers
        # The warm-up skips the backlog of every worker's batches ahead; as many are in
        # flight while the window runs, which needs a round of workers and two batches more.
        if length is not None and ((2 * AHEAD_PREFETCH + 1) * workers + 3) * batch > length:
            continue
        extra = workers * (AHEAD_PREFETCH - SWEEP_PREFETCH) * batch * sample_bytes
        if (
            budget is not None
            and point.memory_bytes is not None
            and point.memory_bytes + extra > MEMORY_MARGIN * budget
        ):
            continue
        try:
            return (
                _measure_loader(workload, dataset, batch, workers, SWEEP_PREFETCH),
                _measure_loader(workload, dataset, batch, workers, AHEAD_PREFETCH),
            )
        except RuntimeError:
            return None
    return None


def large_batch_size(
    plan: ProfilePlan, best: LoaderPoint, length: int | None, sample_bytes: int
) -> int | None:
    """The largest batch of the space at 2 to :data:`LARGE_BATCH_FACTOR` times the sweep's that
    an epoch of ``length`` samples holds enough of for ``best``'s workers, whose batches in
    flight stay within :data:`LARGE_BATCH_BYTES` and the memory budget, and whose timing takes
    :data:`LARGE_BATCH_S` at most at ``best``'s rate; None if none does."""
    workers, small = best.num_workers, plan.loader_batch_size
    # Each worker and the main process hold a batch or two of the larger size.
    in_flight = 2 * (workers + 1) * sample_bytes
    larger = [
        b
        for b in plan.batch_sizes
        if 2 * small <= b <= LARGE_BATCH_FACTOR * small
        and (length is None or (2 * workers + 3) * b <= length)
        and in_flight * b <= LARGE_BATCH_BYTES
        and _loader_seconds(best, b) <= LARGE_BATCH_S
    ]
    if not larger:
        return None
    batch = max(larger)
    budget = plan.memory_budget_bytes
    if (
        budget is not None
        and best.memory_bytes is not None
        and best.memory_bytes + in_flight * (batch - small) > MEMORY_MARGIN * budget
    ):
        return None
    return batch


def _loader_seconds(point: LoaderPoint, batch: int) -> float:
    """Seconds :func:`_measure_loader` takes with ``point``'s workers at ``batch`` if they
    read at ``point``'s rate: the warm-up's round, then a window of a round and two batches
    (at least :data:`LOADER_WINDOW_S`)."""
    workers, rate = point.num_workers, point.samples_per_s
    return (workers + 1) * batch / rate + max(LOADER_WINDOW_S, (workers + 2) * batch / rate)
