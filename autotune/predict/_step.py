"""The step alone: each configuration's samples/s, CPU time and memory from the profile's step.

The profile times forward, backward and optimizer step per batch, precision and layout (and
on fewer intra-op threads); a configuration's step is read from those points through their
curve (:func:`step_curve`), interpolated between batches, scaled to its thread count, to the
gradient accumulation it runs, to its compile mode's timed ratio
(:mod:`~autotune.predict._compile`) and to the seconds its optimizer implementation saved
(:mod:`~autotune.predict._optimizer`), and borrowed from another precision where its own never
ran.
Between its steps the training thread also receives each batch from the workers and copies it
to the device: host time added to the step's (:attr:`StepColumns.training_samples_per_s`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from autotune.predict._columns import AMPS, BoolArray, Columns, FloatArray
from autotune.predict._compile import COMPILE_TIMED, compile_columns
from autotune.predict._optimizer import OPTIMIZER_TIMED, with_optimizer
from autotune.predict._profile import Profile, StepPoint, step_curve
from autotune.predict._uncertainty import (
    BASE_UNCERTAINTY,
    EXTRAPOLATED,
    INTERPOLATED,
    NOT_COVERED,
    interpolate,
)

#: Ratios of a step on fewer threads to the default's, by ascending batch, whose median holds
#: for the batches beyond them.
EDGE_RATIOS = 3


@dataclass(frozen=True)
class StepColumns:
    """The step of each configuration, and what the training thread adds to it per batch."""

    #: Samples/s of the step alone (forward, backward, optimizer step).
    samples_per_s: FloatArray
    cpu_s_per_sample: FloatArray
    uncertainty: FloatArray
    out_of_memory: BoolArray
    #: Seconds to put a batch on the device (0 where a pinned batch's copy runs beside it).
    copy_s: FloatArray
    #: The main process's seconds to receive a batch from the workers.
    receive_s: FloatArray
    #: The memory model's bytes at the batch (NaN without a model), and its bytes per sample.
    memory_bytes: FloatArray
    per_sample_bytes: FloatArray
    batch_size: FloatArray
    #: Whether the sweep timed the step at the configuration's batch or a larger one, in its
    #: precision and layout: False where its rate is extrapolated past the sweep (see
    #: :attr:`~autotune.predict.Predictions.step_timed`).
    timed: BoolArray

    @property
    def training_samples_per_s(self) -> FloatArray:
        """Samples/s of the training thread: the step, then receiving the batch and copying
        it to the device, one after the other."""
        batch = self.batch_size
        return np.asarray(
            batch / (batch / self.samples_per_s + self.receive_s + self.copy_s), dtype=np.float64
        )


@dataclass(frozen=True)
class _StepPart:
    """The step's capacity at one batch, and how it was obtained."""

    samples_per_s: float
    cpu_s_per_sample: float
    uncertainty: float
    out_of_memory: bool = False
    #: Seconds to put the batch on the device without pinned memory.
    copy_s: float = 0.0
    #: The sweep timed this batch or a larger one in this precision and layout.
    timed: bool = True


def step_columns(profile: Profile, columns: Columns, receive_s: FloatArray) -> StepColumns:
    """The step of every configuration of ``columns``, each main process taking ``receive_s``
    seconds per batch to receive it (see :func:`autotune.predict._loader.loader_columns`)."""
    n = len(columns)
    rate, cpu, uncertainty, copy = np.empty(n), np.empty(n), np.empty(n), np.empty(n)
    out_of_memory = np.zeros(n, dtype=bool)
    timed = np.ones(n, dtype=bool)
    memory = np.full(n, np.nan)
    per_sample_bytes = np.zeros(n)
    keys = columns.amp * 2 + columns.channels_last.astype(np.int64)
    for key in np.unique(keys):
        amp, channels_last = AMPS[int(key) // 2], bool(int(key) % 2)
        in_combo = keys == key
        model = profile.memory_model(amp, channels_last) or profile.memory_model("off", False)
        for batch in np.unique(columns.batch_size[in_combo]):
            at_batch = in_combo & (columns.batch_size == batch)
            part = _step_part(profile, amp, channels_last, int(batch))
            for threads in np.unique(columns.intra_op_threads[at_batch]):
                where = at_batch & (columns.intra_op_threads == threads)
                on = _on_threads(profile, part, int(threads), amp, channels_last, int(batch))
                rate[where], cpu[where] = on.samples_per_s, on.cpu_s_per_sample
                uncertainty[where], out_of_memory[where] = on.uncertainty, on.out_of_memory
                copy[where], timed[where] = on.copy_s, on.timed
            if model is not None:
                memory[at_batch] = model.predict(float(batch))
                per_sample_bytes[at_batch] = model.per_sample_bytes
    rate, cpu = _accumulating(profile, columns, rate, cpu)
    # A compiled step: the eager step scaled by the ratio the profile timed for its mode.
    compiled = compile_columns(profile, columns)
    rate, cpu = rate * compiled.ratio, cpu / compiled.ratio
    uncertainty = uncertainty + np.where(compiled.timed & (columns.compile > 0), COMPILE_TIMED, 0.0)
    # Another optimizer implementation: the seconds per optimizer step the profile saw it save.
    rate, cpu, optimizer_timed = with_optimizer(profile, columns, rate, cpu)
    uncertainty = uncertainty + np.where(
        optimizer_timed & (columns.optimizer_impl > 0), OPTIMIZER_TIMED, 0.0
    )
    # A copy from pinned memory on CUDA does not wait: the loader's pinning thread copies
    # beside the step.
    copy = np.where(columns.pin_memory & (profile.device_type == "cuda"), 0.0, copy)
    return StepColumns(
        samples_per_s=rate,
        cpu_s_per_sample=cpu,
        uncertainty=uncertainty,
        out_of_memory=out_of_memory,
        copy_s=copy,
        receive_s=receive_s,
        memory_bytes=memory,
        per_sample_bytes=per_sample_bytes,
        batch_size=columns.batch_size.astype(np.float64),
        timed=timed,
    )


def _step_part(profile: Profile, amp: str, channels_last: bool, batch: int) -> _StepPart:
    """The step alone at ``batch``: measured, interpolated, or borrowed from another precision."""
    points = profile.step_points(amp, channels_last)
    extra = 0.0
    if not any(p.samples_per_s for p in points):
        points = _fallback_points(profile)
        extra = NOT_COVERED
        if not points:
            return _StepPart(math.inf, 0.0, NOT_COVERED, timed=False)
    elif any(p.out_of_memory and p.batch_size <= batch for p in points):
        return _StepPart(0.0, 0.0, BASE_UNCERTAINTY, out_of_memory=True)
    ran = [p for p in points if p.samples_per_s]
    batches = [float(p.batch_size) for p in ran]
    rates = [float(p.samples_per_s or 0.0) for p in step_curve(ran)]
    if batch < batches[0]:
        # Per-step overheads dominate small batches: scale the smallest point down linearly,
        # a conservative guess.
        rate, added = rates[0] * batch / batches[0], EXTRAPOLATED
    else:
        rate, added = interpolate(batches, rates, float(batch))
    cpu = [p.cpu_s_per_sample for p in ran]
    cpu_per_sample = 0.0
    if all(c is not None for c in cpu):
        cpu_per_sample, _ = interpolate(batches, [float(c or 0.0) for c in cpu], float(batch))
    return _StepPart(
        rate,
        cpu_per_sample,
        BASE_UNCERTAINTY + added + extra,
        copy_s=_copy_at(ran, batch),
        timed=not extra and batch <= batches[-1],
    )


def _on_threads(
    profile: Profile, part: _StepPart, threads: int, amp: str, channels_last: bool, batch: int
) -> _StepPart:
    """The step part on ``threads`` intra-op threads (0: PyTorch's default, as the sweep ran).

    Scaled by the ratio of the two measured where the profile timed the step on those threads
    (see :func:`_thread_ratios`; interpolated between its batches, the smallest's below them,
    the median of the largest :data:`EDGE_RATIOS` above them); where it did not, by the ratio
    another precision showed, else by their share of the default's threads.
    """
    default_threads = profile.default_threads or profile.cpu_count
    if (
        threads in (0, default_threads)
        or part.out_of_memory
        or not math.isfinite(part.samples_per_s)
    ):
        return part
    if threads > default_threads:  # beyond a thread per core: not faster, and not timed
        return replace(part, uncertainty=part.uncertainty + INTERPOLATED)
    points = profile.thread_points(threads, amp, channels_last)
    added = 0.0
    if not points:
        points = [p for p in profile.step_threads if p.threads == threads and p.samples_per_s]
        added = NOT_COVERED
    ratios = sorted(_thread_ratios(profile, points))
    if not ratios:
        ratio, cores, added = threads / default_threads, float(threads), NOT_COVERED
    else:
        if batch > ratios[-1][0]:
            # Beyond the batches timed on these threads, the ratio the largest few read.
            ratio = statistics.median(r[1] for r in ratios[-EDGE_RATIOS:])
            interpolated = EXTRAPOLATED
        else:
            ratio, interpolated = interpolate(
                [r[0] for r in ratios], [r[1] for r in ratios], float(batch)
            )
        added = max(added, interpolated)
        measured_cores = [r[2] for r in ratios if r[2] is not None]
        cores = float(np.median(measured_cores)) if measured_cores else float(threads)
    rate = part.samples_per_s * ratio
    return replace(
        part,
        samples_per_s=rate,
        cpu_s_per_sample=cores / rate if rate else 0.0,
        uncertainty=part.uncertainty + added,
    )


def _thread_ratios(
    profile: Profile, points: Sequence[StepPoint]
) -> list[tuple[float, float, float | None]]:
    """(batch, rate on the points' threads / the default's rate, cores busy) per point: both
    rates read through their curves (:func:`step_curve`), as the predictor reads the default's.

    A ratio of two single windows seconds apart takes in any dip of either, and one slow
    window would then read fewer threads as fast as the default at every larger batch; read
    through the curves, a lone point off its curve counts as its neighbours say (evidence:
    ``benchmarks/log/``).
    """
    combos = {(p.amp, p.channels_last) for p in points}
    ratios = []
    for amp, channels_last in combos:
        default = {
            p.batch_size: float(p.samples_per_s or 0.0)
            for p in step_curve(profile.step_points(amp, channels_last))
        }
        for point in step_curve(
            [p for p in points if (p.amp, p.channels_last) == (amp, channels_last)]
        ):
            if default.get(point.batch_size):
                ratios.append(
                    (
                        float(point.batch_size),
                        float(point.samples_per_s or 0.0) / default[point.batch_size],
                        point.cpu_cores,
                    )
                )
    return ratios


def _copy_at(points: Sequence[StepPoint], batch: int) -> float:
    """Seconds to copy a batch of ``batch`` to the device: in proportion to the measured
    batch nearest in size (a copy moves bytes); 0 where no point timed its copy."""
    timed = [p for p in points if p.copy_s is not None]
    if not timed:
        return 0.0
    nearest = min(timed, key=lambda p: abs(math.log(p.batch_size / batch)))
    return float(nearest.copy_s or 0.0) * batch / nearest.batch_size


def _fallback_points(profile: Profile) -> list[StepPoint]:
    """The points of fp32 without channels_last, else of whatever precision ran."""
    for amp, channels_last in [("off", False), *((a, c) for a in AMPS for c in (False, True))]:
        points = profile.step_points(amp, channels_last)
        if any(p.samples_per_s for p in points):
            return [p for p in points if not p.out_of_memory]
    return []


def _accumulating(
    profile: Profile, columns: Columns, step_rate: FloatArray, step_cpu: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """The step's samples/s and CPU seconds per sample where a configuration accumulates
    gradients over ``k`` micro-batches: the step points paid the optimizer step once per batch,
    such a configuration once per ``k``, and its other micro-steps add into the gradients kept
    (see :class:`AccumulationPoint`), so each micro-step is shorter by ``(1 - 1/k)`` of what
    an optimizer step left out saves, and its CPU time with it (a saving timed longer than a
    whole step counts as the whole step: a micro-step is never shorter than a ``k``-th).
    Unchanged where the profile has no such timing."""
    point = profile.accumulation
    accumulates = columns.grad_accum_steps > 1
    if point is None or not accumulates.any():
        return step_rate, step_cpu
    batch = columns.batch_size.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        saved_share = np.minimum(1.0, point.saved_s * step_rate / batch)
        share = 1.0 - saved_share * (1.0 - 1.0 / columns.grad_accum_steps)
    share = np.nan_to_num(share, nan=1.0)
    return step_rate / share, step_cpu * share
