"""The loader alone: each configuration's samples/s, CPU time and memory from the loader sweep.

The sweep times each worker count at one batch size with one batch ahead per worker. A
configuration's loader is read at its worker count (interpolated between the counts timed, by
the seconds a round of the workers takes), scaled to its batch (:func:`loader_model`), and
sped up where its workers hold more batches ahead than the sweep's one
(:func:`_with_batches_ahead`). Over whole epochs it is read again in
:mod:`autotune.predict._epochs`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.predict._columns import Columns, FloatArray, IntArray
from autotune.predict._loader_model import LoaderModel, loader_model
from autotune.predict._profile import LoaderPoint, Profile
from autotune.predict._uncertainty import (
    BASE_UNCERTAINTY,
    EXTRAPOLATED,
    INTERPOLATED,
    NOT_COVERED,
    PROFILED_PREFETCH,
    interpolate,
)


@dataclass(frozen=True)
class LoaderColumns:
    """The loader of each configuration, at its workers, batch and batches ahead."""

    samples_per_s: FloatArray
    cpu_s_per_sample: FloatArray
    uncertainty: FloatArray
    #: The main process's seconds to receive a batch from the workers (0 without workers).
    receive_s: FloatArray
    #: How the loader scales with the batch (:func:`loader_model`).
    model: LoaderModel


@dataclass(frozen=True)
class _LoaderPart:
    """The loader's capacity at one worker count, and how it was obtained."""

    samples_per_s: float
    cpu_s_per_sample: float
    uncertainty: float
    #: The main process's seconds per batch to receive it from the workers.
    main_s_per_batch: float = 0.0


def loader_columns(profile: Profile, columns: Columns) -> LoaderColumns:
    """The loader of every configuration of ``columns``."""
    rate, cpu, uncertainty, receive = _at_profiled_batch(profile.loader, columns.num_workers)
    model = loader_model(profile)
    batch = columns.batch_size.astype(np.float64)
    no_workers = columns.num_workers == 0
    profiled = profile.loader_batch_size
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rate = np.where(
            no_workers, rate, model.at_batch(rate, columns.num_workers, batch, float(profiled))
        )
        growth = model.receive_growth(batch, profiled)
        cpu = cpu * np.where(no_workers, 1.0, model.cpu_growth(batch, profiled))
        rate = _with_batches_ahead(profile, columns, rate, growth)
    return LoaderColumns(rate, cpu, uncertainty, receive * growth, model)


def loader_rates(
    profile: Profile, workers: IntArray, batch: FloatArray, model: LoaderModel
) -> FloatArray:
    """The loader's samples/s with ``workers`` (each at least 1) at ``batch``."""
    rate, _, _, _ = _at_profiled_batch(profile.loader, workers)
    return model.at_batch(rate, workers, batch, float(profile.loader_batch_size))


def loader_memory(profile: Profile, columns: Columns) -> FloatArray:
    """Memory the configuration adds beyond the step: on a CPU the workers and the batches
    they hold ahead; on CUDA the batch a device prefetch holds."""
    batch_bytes = columns.batch_size * float(profile.sample_bytes)
    if profile.device_type == "cuda":
        return np.where(columns.device_prefetch, batch_bytes, 0.0)
    workers = columns.num_workers.astype(np.float64)
    ahead = workers * columns.prefetch_factor * batch_bytes
    return workers * profile.worker_memory_bytes + ahead


def _at_profiled_batch(
    points: Sequence[LoaderPoint], workers: IntArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Per entry of ``workers``: the loader's samples/s at the profiled batch, its CPU seconds
    per sample, its uncertainty, and the main process's seconds to receive a batch."""
    rate, cpu, uncertainty, receive = (np.empty(len(workers)) for _ in range(4))
    for count in np.unique(workers):
        where = workers == count
        part = _loader_part(points, int(count))
        rate[where], cpu[where] = part.samples_per_s, part.cpu_s_per_sample
        uncertainty[where], receive[where] = part.uncertainty, part.main_s_per_batch
    return rate, cpu, uncertainty, receive


def _loader_part(points: Sequence[LoaderPoint], workers: int) -> _LoaderPart:
    """The loader at ``workers`` from the sweep's points at the profiled batch.

    Between two counts timed, a round of the workers (a batch from each) takes seconds that
    grow linearly with the count: constant where every worker reads at its own pace (the rate
    grows in proportion), in proportion where they share saturated cores (the rate stays
    flat). So the rate is interpolated through the round's seconds, not read in
    ``log(1 + workers)``, which would credit a count between with most of the gain early
    (evidence: ``benchmarks/log/``).
    """
    if not points:
        return _LoaderPart(math.inf, 0.0, NOT_COVERED)
    ordered = sorted(points, key=lambda p: p.num_workers)
    counts = [float(p.num_workers) for p in ordered]
    if workers > 0 and counts[0] == 0:
        # Without workers the loader runs in the main process: not a point of the worker curve.
        ordered, counts = ordered[1:], counts[1:]
        if not ordered:
            return _LoaderPart(points[0].samples_per_s, points[0].cpu_s_per_sample, NOT_COVERED)
    if workers == 0 and counts[0] != 0:
        first = ordered[0]
        return _LoaderPart(
            first.samples_per_s / max(1, first.num_workers), first.cpu_s_per_sample, EXTRAPOLATED
        )
    rates = [p.samples_per_s for p in ordered]
    rate, added = interpolate(counts, rates, float(workers))
    if added == INTERPOLATED and workers > 0 and all(rates):
        round_s, _ = interpolate(
            counts, [c / r for c, r in zip(counts, rates, strict=True)], float(workers), scale=float
        )
        rate = workers / round_s
    cpu, _ = interpolate(counts, [p.cpu_s_per_sample for p in ordered], float(workers))
    main, _ = interpolate(counts, [p.main_cpu_s_per_batch or 0.0 for p in ordered], float(workers))
    return _LoaderPart(
        rate, cpu, BASE_UNCERTAINTY + added, main_s_per_batch=main if workers else 0.0
    )


@dataclass(frozen=True)
class _AheadTiming:
    """What a second batch ahead per worker gained where the profile timed it."""

    #: Seconds per batch that a worker holding one batch ahead (as the sweep's do) waits, per
    #: worker before it in the round, for the main process to take their batches, in order,
    #: before it is given its next.
    wait_s: float
    #: The worker count timed with more ahead, and its samples/s ratio to the same count with
    #: one ahead.
    workers: int
    gain: float


def _ahead_timing(profile: Profile) -> _AheadTiming | None:
    """The profile's timing with more batches ahead against the same count with one ahead,
    timed right before it; None where it has none, or more ahead was no faster.

    The wait is read as the share of that count's round it took, on the round the sweep
    timed that count at (the rate every prediction starts from): on a machine whose speed
    moves, the sweep and the timing one ahead, seconds apart, read a count's rate apart, and
    a wait in seconds would then gain that count more or less than it gained where it was
    timed."""
    ahead, swept = profile.loader_prefetch, profile.loader_one_ahead
    if (
        ahead is None
        or swept is None
        or not ahead.num_workers
        or ahead.samples_per_s <= swept.samples_per_s
    ):
        return None
    per_worker_batch = ahead.num_workers * float(profile.loader_batch_size)
    sweep_rate = next(
        (
            p.samples_per_s
            for p in profile.loader
            if p.num_workers == ahead.num_workers and p.samples_per_s
        ),
        swept.samples_per_s,
    )
    wait_share = 1.0 - swept.samples_per_s / ahead.samples_per_s
    waited = wait_share * per_worker_batch / sweep_rate
    return _AheadTiming(
        waited / ahead.num_workers, ahead.num_workers, ahead.samples_per_s / swept.samples_per_s
    )


def _with_batches_ahead(
    profile: Profile, columns: Columns, rate: FloatArray, receive_growth: FloatArray
) -> FloatArray:
    """The loader's samples/s where each worker holds more batches ahead than the sweep's
    one: a worker's round is shorter by the wait :func:`_ahead_timing` timed, which grows with
    the workers before it in the round and with the batch as receiving one does; beyond the
    count timed the gain is that count's (the waits of more workers overlap, so the gain
    levels off); at most 2x."""
    timing = _ahead_timing(profile)
    ahead = (columns.num_workers > 0) & (columns.prefetch_factor > PROFILED_PREFETCH)
    if timing is None or not ahead.any():
        return rate
    workers = columns.num_workers.astype(np.float64)
    round_s = workers * columns.batch_size / rate
    shorter = np.where(
        workers > timing.workers,
        round_s / timing.gain,
        round_s - timing.wait_s * receive_growth * workers,
    )
    shorter = np.maximum(shorter, round_s / 2)
    return np.asarray(
        np.where(ahead, workers * columns.batch_size / shorter, rate), dtype=np.float64
    )
