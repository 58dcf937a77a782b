"""Calibration: the scale a job's trials ran at against the profile's predictions.

The profile reads each point in a fraction of a second, in one moment of the machine; the
trials it covers tell the scale the job really runs at. A trial's measured / predicted
samples/s (:class:`CoveredRatio`) counts toward the median of its :class:`ScaleClass`, the
trials that err the same way: on a CPU device by their handling of freed memory and by where
they load, on a CUDA device by where they load alone (the host's heap is no part of a step the
GPU runs). Evidence: ``benchmarks/RESULTS.md`` and ``benchmarks/log/``.
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from autotune.predict import Columns, Profile, predict_configs
from autotune.space import Config

#: Knobs the profile's eager step knows nothing of: a trial's gain through one (a compiled
#: step, an optimizer implementation it did not time, TF32, cuDNN's autotuner, pinned or
#: device-prefetched copies) is no error of the profile's scale. Loader-side knobs it does not
#: time (persistent workers, other prefetch factors) stay in: they move a configuration's
#: throughput by its epoch's start, where these can double the step on a GPU.
UNSCALED_KNOBS = frozenset(
    {"compile", "optimizer_impl", "tf32", "cudnn_benchmark", "pin_memory", "device_prefetch"}
)


def splits_by_heap(device_type: str) -> bool:
    """Whether trials on ``device_type`` are scaled apart by their handling of freed memory.

    On a CPU device glibc's heap is part of the step the profile timed, and how often it hands
    memory back differs between processes; on a CUDA device the step runs on the GPU, so the
    host's heap is no error of the profile's scale and splitting by it would only halve the
    trials each scale is read from.
    """
    return device_type != "cuda"


class ScaleClass(NamedTuple):
    """What the job's trials are scaled by apart (see :func:`measured_scales`)."""

    #: The configuration's handling of freed memory; None on a device where it splits no
    #: class (see :func:`splits_by_heap`).
    retain_freed_memory: bool | None
    #: No workers: the main process loads each batch, then steps on it.
    loads_in_main: bool

    @classmethod
    def of(cls, config: Config, device_type: str) -> ScaleClass:
        """The class of ``config`` on a ``device_type`` device."""
        heap = config.retain_freed_memory if splits_by_heap(device_type) else None
        return cls(heap, config.num_workers == 0)

    @classmethod
    def every(cls, heap_splits: bool) -> list[ScaleClass]:
        """Every class of a device that does (or does not) split by the heap."""
        heaps: tuple[bool | None, ...] = (True, False) if heap_splits else (None,)
        return [cls(heap, main) for heap, main in itertools.product(heaps, (True, False))]

    def covers(self, columns: Columns) -> npt.NDArray[np.bool_]:
        """Which configurations of ``columns`` are of this class."""
        rows = (columns.num_workers == 0) == self.loads_in_main
        if self.retain_freed_memory is not None:
            rows &= columns.retain_freed_memory == self.retain_freed_memory
        return rows


@dataclass(frozen=True)
class CoveredRatio:
    """A measured configuration the profile covers, and its measured / predicted samples/s."""

    kind: ScaleClass
    samples_per_s: float
    ratio: float


def covered_ratios(
    profile: Profile,
    measured: Sequence[tuple[Config, float]],
    memory_budget_bytes: int | None = None,
) -> list[CoveredRatio]:
    """The measured / predicted samples/s of the measured configurations that ran and set
    none of :data:`UNSCALED_KNOBS` otherwise than the profile ran them, each classed for the
    profile's device."""
    runs = [(config, value) for config, value in measured if value > 0]
    if not runs:
        return []
    predictions = predict_configs(profile, [config for config, _ in runs], memory_budget_bytes)
    covered = []
    for index, (config, value) in enumerate(runs):
        predicted = float(predictions.samples_per_s[index])
        unscaled = predictions.uncovered_knobs(index) & UNSCALED_KNOBS
        # A compiled step's ratio, timed at one batch, errs its own way, not at the scale.
        if not unscaled and config.compile == "off" and 0 < predicted < float("inf"):
            kind = ScaleClass.of(config, profile.device_type)
            covered.append(CoveredRatio(kind, value, value / predicted))
    return covered


def measured_scales(covered: Sequence[CoveredRatio]) -> dict[ScaleClass, float]:
    """The median measured / predicted samples/s of the covered trials (see
    :func:`covered_ratios`) per :class:`ScaleClass` of their device; a class without such a
    trial takes the median of those with its handling of freed memory, else of all. Empty
    before any.

    Each class errs its own way: glibc's defaults are timed in a fresh heap once and handed
    back differently in each process (on a CPU device), and the loader and the step, timed
    apart, are joined one after the other without workers and side by side with them. Scaled
    apart, more confirmed finalists came within 15% of their prediction than scaled together
    (evidence: ``benchmarks/log/``).
    """
    by_class: dict[ScaleClass, list[float]] = defaultdict(list)
    by_heap: dict[bool | None, list[float]] = defaultdict(list)
    for trial in covered:
        by_class[trial.kind].append(trial.ratio)
        by_heap[trial.kind.retain_freed_memory].append(trial.ratio)
    pooled = [trial.ratio for trial in covered]
    if not pooled:
        return {}
    # Every trial of a job ran on one device: their classes tell whether its heap splits them.
    heap_splits = any(trial.kind.retain_freed_memory is not None for trial in covered)
    return {
        kind: statistics.median(by_class[kind] or by_heap[kind.retain_freed_memory] or pooled)
        for kind in ScaleClass.every(heap_splits)
    }


def scale_per_configuration(
    columns: Columns, scales: dict[ScaleClass, float]
) -> npt.NDArray[np.float64]:
    """Each configuration's scale (see :func:`measured_scales`): 1 where none is known."""
    scale = np.ones(len(columns))
    for kind, value in scales.items():
        scale[kind.covers(columns)] = value
    return scale


def highest_other_ratio(covered: Sequence[CoveredRatio]) -> float | None:
    """The highest measured / predicted of the covered trials (see :func:`covered_ratios`)
    other than the fastest measured of them; None with fewer than two.

    The best measured is the fastest of noisy trials, above their median scale by about their
    spread: it breaks through the profile's ceiling only where it stands out from the other
    trials as well, or a search takes one lucky reading for a breakthrough and spends its whole
    budget (evidence: ``benchmarks/log/``).
    """
    by_speed = sorted(covered, key=lambda trial: trial.samples_per_s)
    return max((trial.ratio for trial in by_speed[:-1]), default=None)
