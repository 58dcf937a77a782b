"""How the loader's rate, receiving cost and CPU time change with the batch size.

The loader sweep times each worker count at one batch size; a configuration's batch differs.
The loader is read as two stages: workers in parallel, each spending a part per batch and a
part per sample (:class:`BatchCost`), and a ceiling the main process puts on receiving them.
The profile's extra timings (the fewest workers and one count again at a larger batch) fit
those lines; without them the main process's receiving cost stands in. Only ratios between
batch sizes are used: the sweep's rate at its own batch, per worker count, stays the measured
one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.predict._columns import FloatArray, IntArray
from autotune.predict._profile import LoaderPoint, Profile
from autotune.predict._soft_min import SOFT_MIN_POWER, soft_min


@dataclass(frozen=True)
class BatchCost:
    """Seconds per batch: a part per batch plus a part per sample."""

    fixed_s: float
    per_sample_s: float

    @classmethod
    def through(cls, small: float, small_s: float, large: float, large_s: float) -> BatchCost:
        """The line through two (batch, seconds) points, neither part below zero."""
        per_sample = max(0.0, (large_s - small_s) / (large - small))
        fixed = max(0.0, small_s - per_sample * small)
        return cls(fixed, (small_s - fixed) / small)

    def seconds(self, batch: FloatArray) -> FloatArray:
        return np.asarray(self.fixed_s + self.per_sample_s * batch, dtype=np.float64)

    def at(self, batch: float) -> float:
        return self.fixed_s + self.per_sample_s * batch


@dataclass(frozen=True)
class LoaderModel:
    """How the loader's rate changes with the batch: workers in parallel, each spending
    :attr:`worker` seconds per batch, and the main process receiving every batch, at most
    :attr:`ceiling`. Every part is optional: one the profile gives no grounds for leaves
    what it scales as the sweep measured it."""

    #: A worker's seconds per batch; None without a worker count timed (then every rate
    #: stays the sweep's, whatever the batch).
    worker: BatchCost | None = None
    #: The main process's ceiling on the loader; None: no ceiling seen.
    ceiling: BatchCost | None = None
    #: The main process's CPU seconds to receive a batch; None: not timed at two batch sizes
    #: (then taken as the sweep's, whatever the batch).
    receive: BatchCost | None = None
    #: CPU seconds the loader burns per batch, its workers' and the main process's together,
    #: from the fewest workers timed at two batch sizes; None: not timed so (then the sweep's
    #: per sample, whatever the batch).
    cpu: BatchCost | None = None

    def at_batch(
        self, rate: FloatArray, workers: IntArray, batch: FloatArray, profiled_batch: float
    ) -> FloatArray:
        """The loader's samples/s at ``batch`` from ``rate``, its measured samples/s with
        ``workers`` at the sweep's batch."""
        if self.worker is None:
            return rate
        profiled = np.full(len(batch), profiled_batch)
        return np.asarray(
            rate * self._shape(workers, batch) / self._shape(workers, profiled), dtype=np.float64
        )

    def receive_growth(self, batch: FloatArray, profiled_batch: float) -> FloatArray:
        """How much longer the main process takes to receive a batch of ``batch`` than one of
        the sweep's."""
        if self.receive is None or not self.receive.at(profiled_batch):
            return np.ones_like(batch)
        return self.receive.seconds(batch) / self.receive.at(profiled_batch)

    def cpu_growth(self, batch: FloatArray, profiled_batch: float) -> FloatArray:
        """The loader's CPU seconds per sample at ``batch`` over those at the sweep's batch:
        below 1 for larger batches, whose cost per batch (collating, handing the batch over)
        is shared by more samples; from the fewest workers timed at two batch sizes, whose
        windows hold the most batches (windows of one round of many workers spread too far
        to read it from)."""
        if self.cpu is None or not self.cpu.at(profiled_batch):
            return np.ones_like(batch)
        return np.asarray(
            self.cpu.seconds(batch) / batch / (self.cpu.at(profiled_batch) / profiled_batch),
            dtype=np.float64,
        )

    def _shape(self, workers: IntArray, batch: FloatArray) -> FloatArray:
        assert self.worker is not None
        rate = workers * batch / self.worker.seconds(batch)
        if self.ceiling is None:
            return np.asarray(rate, dtype=np.float64)
        return soft_min(np.stack([rate, batch / self.ceiling.seconds(batch)]))


def loader_model(profile: Profile) -> LoaderModel:
    """The loader's two stages from the profile; every part None without a worker count timed.

    A worker's split comes from the fewest workers timed at two batch sizes; without that, its
    part per batch is taken as the main process's receiving cost (at most half its batch's
    time). The ceiling is the fastest count's rate at the sweep's batch, and grows with the
    batch as a count timed at two batch sizes says (fitted so that the model gives that count's
    measured rate at both); without that, with the receiving cost as its part per batch. Where
    that count's larger batch ran faster than its workers could, there is no ceiling, and a
    worker's split, unless measured, is taken from that pair (the guess was wrong). The main
    process's receiving grows with the batch as its CPU time per batch did between the pair;
    the loader's CPU time (its workers' and the main process's) as it did between the fewest
    workers' two batch sizes.
    """
    with_workers = sorted((p for p in profile.loader if p.num_workers), key=lambda p: p.num_workers)
    if not with_workers:
        return LoaderModel()
    worker, cpu = _worker_cost(profile, with_workers[0])
    pair = _large_batch_pair(profile, with_workers)
    receive = None if pair is None else _receive_cost(profile, pair)
    worker, ceiling = _ceiling(profile, with_workers, worker, cpu is not None, pair)
    return LoaderModel(worker, ceiling, receive, cpu)


#: A count timed at the sweep's batch and the same count timed at the larger batch, and that
#: batch size.
_Pair = tuple[LoaderPoint, LoaderPoint, int]


def _worker_cost(profile: Profile, fewest: LoaderPoint) -> tuple[BatchCost, BatchCost | None]:
    """A worker's seconds per batch, and the loader's CPU seconds per batch where the fewest
    workers were timed at two batch sizes (None where they were not: then the worker's part
    per batch is the main process's receiving cost, at most half the batch's time)."""
    small = float(profile.loader_batch_size)
    fewest_s = fewest.num_workers * small / fewest.samples_per_s
    again, again_batch = profile.loader_fewest_workers, profile.loader_fewest_workers_batch_size
    if again is None or again_batch is None or again.num_workers != fewest.num_workers:
        fixed = min(fewest.main_cpu_s_per_batch or 0.0, fewest_s / 2)
        return BatchCost(fixed, (fewest_s - fixed) / small), None
    worker = BatchCost.through(
        small, fewest_s, float(again_batch), again.num_workers * again_batch / again.samples_per_s
    )
    cpu = BatchCost.through(
        small,
        fewest.cpu_s_per_sample * small,
        float(again_batch),
        again.cpu_s_per_sample * again_batch,
    )
    return worker, cpu


def _large_batch_pair(profile: Profile, with_workers: list[LoaderPoint]) -> _Pair | None:
    """The count the profile timed again at a larger batch, at both batches; None without."""
    large, large_batch = profile.loader_large_batch, profile.loader_large_batch_size
    if large is None or large_batch is None:
        return None
    paired = next((p for p in with_workers if p.num_workers == large.num_workers), None)
    return None if paired is None else (paired, large, large_batch)


def _receive_cost(profile: Profile, pair: _Pair) -> BatchCost | None:
    """The main process's receiving cost per batch through the pair's two timings; None
    where either did not time it."""
    paired, large, large_batch = pair
    if not (paired.main_cpu_s_per_batch and large.main_cpu_s_per_batch):
        return None
    return BatchCost.through(
        float(profile.loader_batch_size),
        paired.main_cpu_s_per_batch,
        float(large_batch),
        large.main_cpu_s_per_batch,
    )


def _ceiling(
    profile: Profile,
    with_workers: list[LoaderPoint],
    worker: BatchCost,
    split_measured: bool,
    pair: _Pair | None,
) -> tuple[BatchCost, BatchCost | None]:
    """A worker's seconds per batch and the main process's ceiling (see :func:`loader_model`):
    without a pair, the fastest count's rate with the receiving cost as its part per batch;
    with one, fitted through the pair where its workers alone would have run faster, else no
    ceiling (and, unless measured, the worker's split from the pair)."""
    small = float(profile.loader_batch_size)
    best = max(with_workers, key=lambda p: p.samples_per_s)
    best_s = small / best.samples_per_s
    if pair is None:
        fixed = min(best.main_cpu_s_per_batch or 0.0, best_s)
        return worker, BatchCost(fixed, (best_s - fixed) / small)
    paired, large, large_batch = pair
    count = np.array([paired.num_workers])
    at_small = soft_min(
        np.stack([count * small / worker.at(small), np.array([best.samples_per_s])])
    )[0]
    wanted = large.samples_per_s * at_small / paired.samples_per_s
    workers_rate = paired.num_workers * large_batch / worker.at(large_batch)
    if wanted < workers_rate:
        ceiling = (wanted**-SOFT_MIN_POWER - workers_rate**-SOFT_MIN_POWER) ** (
            -1.0 / SOFT_MIN_POWER
        )
        return worker, BatchCost.through(small, best_s, float(large_batch), large_batch / ceiling)
    if split_measured:  # the ceiling does not bind at that count; its pair adds nothing
        return worker, None
    paired_s = paired.num_workers * small / paired.samples_per_s
    return BatchCost.through(
        small, paired_s, float(large_batch), large.num_workers * large_batch / large.samples_per_s
    ), None
