"""Predict every configuration of a space from a profile, without running any of them.

A configuration trains no faster than its step alone (at its batch, precision and layout) nor
than its loader alone (at its worker count, and with more batches ahead per worker than the
sweep's one, without the wait the profile timed that costs); without workers the two run one
after the other.
Between its steps the training thread also receives each batch from the workers and copies it to
the device: host time added to the step's. On a CPU device both share the cores, so the rate is
also at most ``cores / (step CPU-s per sample + loader CPU-s per sample)``, a worker beside a
step on every core delays it by its CPU time (:func:`_beside_workers`), and a loader near
those bounds slows before them (see :data:`SHARED_CORES_POWER`). Over a dataset of
known length the loader is timed over whole epochs: its workers share an epoch's batches out in
rounds (the last round part-empty, workers beyond the batch count idle), each epoch fills and
drains the pipeline, and without persistent workers restarts them. Memory comes from the
profile's linear memory model. The work is done on NumPy columns: the profile's tables are
evaluated once per distinct batch/precision/layout and worker count, then gathered, so hundreds
of thousands of configurations take well under a second.
"""

from __future__ import annotations

import bisect
import math
import mmap
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from autotune.predict._profile import LoaderPoint, Profile, StepPoint, step_curve
from autotune.space import KNOBS, TORCH_DEFAULT_PREFETCH_FACTOR, Config, SearchSpace

#: Which side bounds a prediction, by code in :attr:`Predictions.bound`.
BOUNDS = ("step", "loader", "cpu", "memory")
_STEP, _LOADER, _CPU, _MEMORY = range(4)
_AMPS = ("off", "fp16", "bf16")
_COMPILE_MODES = ("off", "default", "max-autotune")

#: Relative uncertainty of a prediction from measured points of every part it uses: the profile
#: times each part alone, and a trial's loop adds epoch starts and contention.
BASE_UNCERTAINTY = 0.1
#: Added when a part had to be interpolated between measured points or extrapolated beyond
#: them, and when its precision/layout was never measured at all.
INTERPOLATED = 0.1
EXTRAPOLATED = 0.3
NOT_COVERED = 0.4
#: Added per knob the profile does not cover that the configuration turns away from what the
#: profile ran (the loader sweep used one batch ahead per worker, no pinning, no persistence).
UNCOVERED_KNOB = {
    "pin_memory": 0.1,
    "device_prefetch": 0.1,
    "cudnn_benchmark": 0.1,
    "tf32": 0.1,
    "persistent_workers": 0.05,
    "prefetch_factor": 0.05,
    # The step sweep runs eagerly: a compiled step's speed (and its compile time) is unknown.
    "compile": 0.5,
    # The profile ran with or without glibc retaining freed memory; the other setting changes
    # how many pages each step faults in afresh, by an amount only a trial shows (the step's,
    # where the profile timed its fresh-heap ratio: then only the workers').
    "retain_freed_memory": 0.1,
}
#: The prefetch factor of the loader sweep (the profile times its fastest count again with
#: PyTorch's default, :attr:`Profile.loader_prefetch`).
PROFILED_PREFETCH = 1

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class _Part:
    """One part's capacity at one point of its table, and how it was obtained."""

    samples_per_s: float
    cpu_s_per_sample: float
    uncertainty: float
    out_of_memory: bool = False
    #: Loader only: the main process's seconds per batch to receive it from the workers.
    main_s_per_batch: float = 0.0
    #: Step only: seconds to put the batch on the device without pinned memory.
    copy_s: float = 0.0


def _interpolate(
    xs: Sequence[float], ys: Sequence[float], x: float, scale: Callable[[float], float] = math.log1p
) -> tuple[float, float]:
    """Linear interpolation in ``scale(x)`` (``log(1 + x)`` unless given) between measured
    points; beyond them the nearest point's value. Returns the value and the uncertainty it
    adds."""
    if x in xs:
        return ys[xs.index(x)], 0.0
    if x < xs[0] or x > xs[-1]:
        return (ys[0] if x < xs[0] else ys[-1]), EXTRAPOLATED
    right = bisect.bisect_left(xs, x)
    x0, x1 = scale(xs[right - 1]), scale(xs[right])
    share = (scale(x) - x0) / (x1 - x0)
    return ys[right - 1] + share * (ys[right] - ys[right - 1]), INTERPOLATED


def _step_part(profile: Profile, amp: str, channels_last: bool, batch: int) -> _Part:
    """The step alone at ``batch``: measured, interpolated, or borrowed from another precision."""
    points = profile.step_points(amp, channels_last)
    extra = 0.0
    if not any(p.samples_per_s for p in points):
        points = _fallback_points(profile)
        extra = NOT_COVERED
        if not points:
            return _Part(math.inf, 0.0, NOT_COVERED)
    elif any(p.out_of_memory and p.batch_size <= batch for p in points):
        return _Part(0.0, 0.0, BASE_UNCERTAINTY, out_of_memory=True)
    ran = [p for p in points if p.samples_per_s]
    batches = [float(p.batch_size) for p in ran]
    rates = [float(p.samples_per_s or 0.0) for p in step_curve(ran)]
    if batch < batches[0]:
        # Per-step overheads dominate small batches: scale the smallest point down linearly,
        # a conservative guess.
        rate, added = rates[0] * batch / batches[0], EXTRAPOLATED
    else:
        rate, added = _interpolate(batches, rates, float(batch))
    cpu = [p.cpu_s_per_sample for p in ran]
    cpu_per_sample = 0.0
    if all(c is not None for c in cpu):
        cpu_per_sample, _ = _interpolate(batches, [float(c or 0.0) for c in cpu], float(batch))
    return _Part(
        rate, cpu_per_sample, BASE_UNCERTAINTY + added + extra, copy_s=_copy_at(ran, batch)
    )


def _on_threads(
    profile: Profile, part: _Part, threads: int, amp: str, channels_last: bool, batch: int
) -> _Part:
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
            ratio, interpolated = _interpolate(
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


#: Ratios of a step on fewer threads to the default's, by ascending batch, whose median holds
#: for the batches beyond them.
EDGE_RATIOS = 3


def _thread_ratios(
    profile: Profile, points: Sequence[StepPoint]
) -> list[tuple[float, float, float | None]]:
    """(batch, rate on the points' threads / the default's rate, cores busy) per point: both
    rates read through their curves (:func:`step_curve`), as the predictor reads the default's.

    A ratio of two single windows seconds apart takes in any dip of either: on a 2-core EPYC
    a default image-cnn job's profile timed bf16 at batch 48 in a slow moment (2,079 samples/s,
    between 2,318 at 32 and 2,905 at 64) and one thread there at 2,118, so every larger batch
    read one thread as fast as two (1.02) where the three other precisions and layouts read
    0.63-0.67 and its trials with one thread ran 0.63-0.92 of their predictions
    (benchmarks/RESULTS.md 1b, one thread's ratio through the curves).
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
    for amp, channels_last in [("off", False), *((a, c) for a in _AMPS for c in (False, True))]:
        points = profile.step_points(amp, channels_last)
        if any(p.samples_per_s for p in points):
            return [p for p in points if not p.out_of_memory]
    return []


def _loader_part(points: Sequence[LoaderPoint], workers: int) -> _Part:
    if not points:
        return _Part(math.inf, 0.0, NOT_COVERED)
    ordered = sorted(points, key=lambda p: p.num_workers)
    counts = [float(p.num_workers) for p in ordered]
    if workers > 0 and counts[0] == 0:
        # Without workers the loader runs in the main process: not a point of the worker curve.
        ordered, counts = ordered[1:], counts[1:]
        if not ordered:
            return _Part(points[0].samples_per_s, points[0].cpu_s_per_sample, NOT_COVERED)
    if workers == 0 and counts[0] != 0:
        first = ordered[0]
        return _Part(
            first.samples_per_s / max(1, first.num_workers), first.cpu_s_per_sample, EXTRAPOLATED
        )
    rates = [p.samples_per_s for p in ordered]
    rate, added = _interpolate(counts, rates, float(workers))
    if added == INTERPOLATED and workers > 0 and all(rates):
        # Between two counts timed, a round of the workers (a batch from each) takes seconds
        # that grow linearly with the count: constant where every worker reads at its own pace
        # (the rate grows in proportion), in proportion where they share saturated cores (the
        # rate stays flat). Interpolated in log(1 + workers) the rate itself reads a count
        # between as if most of the gain came early: a reduced many-workers profile timed 8
        # and 48 workers (518 and 3,072 samples/s, 15 ms reads) and read 24 at 2,058 where
        # 24 such workers deliver 1,540. In three such jobs the trials at 24 workers measured
        # 0.73-0.96 of their predictions, and batch 64 with 48 workers (an epoch ending on a
        # round of 16) 0.78-0.88; replayed this way, 0.96-1.15 and 0.89-0.99
        # (benchmarks/RESULTS-misleading.md).
        round_s, _ = _interpolate(
            counts, [c / r for c, r in zip(counts, rates, strict=True)], float(workers), scale=float
        )
        rate = workers / round_s
    cpu, _ = _interpolate(counts, [p.cpu_s_per_sample for p in ordered], float(workers))
    main, _ = _interpolate(counts, [p.main_cpu_s_per_batch or 0.0 for p in ordered], float(workers))
    return _Part(rate, cpu, BASE_UNCERTAINTY + added, main_s_per_batch=main if workers else 0.0)


@dataclass(frozen=True)
class Columns:
    """Configurations as NumPy columns (one entry per configuration)."""

    batch_size: IntArray
    num_workers: IntArray
    amp: IntArray  # index into ("off", "fp16", "bf16")
    channels_last: BoolArray
    pin_memory: BoolArray
    device_prefetch: BoolArray
    persistent_workers: BoolArray
    prefetch_factor: IntArray  # 0 without workers
    cudnn_benchmark: BoolArray
    tf32: BoolArray  # True when TF32 is forced on
    compile: IntArray  # index into ("off", "default", "max-autotune")
    retain_freed_memory: BoolArray
    intra_op_threads: IntArray  # 0: PyTorch's default
    grad_accum_steps: IntArray  # micro-batches per optimizer step

    def __len__(self) -> int:
        return len(self.batch_size)

    @classmethod
    def of(cls, configs: Iterable[Config]) -> Columns:
        rows = [c.normalized() for c in configs]
        return cls(
            batch_size=np.array([c.batch_size for c in rows], dtype=np.int64),
            num_workers=np.array([c.num_workers for c in rows], dtype=np.int64),
            amp=np.array([_AMPS.index(c.amp) for c in rows], dtype=np.int64),
            channels_last=np.array([c.channels_last for c in rows], dtype=bool),
            pin_memory=np.array([c.pin_memory for c in rows], dtype=bool),
            device_prefetch=np.array([c.device_prefetch for c in rows], dtype=bool),
            persistent_workers=np.array([c.persistent_workers for c in rows], dtype=bool),
            prefetch_factor=np.array([c.prefetch_factor or 0 for c in rows], dtype=np.int64),
            cudnn_benchmark=np.array([c.cudnn_benchmark for c in rows], dtype=bool),
            tf32=np.array([c.tf32 is True for c in rows], dtype=bool),
            compile=np.array([_COMPILE_MODES.index(c.compile) for c in rows], dtype=np.int64),
            retain_freed_memory=np.array([c.retain_freed_memory for c in rows], dtype=bool),
            intra_op_threads=np.array([c.intra_op_threads or 0 for c in rows], dtype=np.int64),
            grad_accum_steps=np.array([c.grad_accum_steps for c in rows], dtype=np.int64),
        )

    @classmethod
    def of_space(cls, space: SearchSpace) -> Columns:
        """Every configuration of ``space``, in the order of :meth:`SearchSpace.all_configs`."""
        names = [n for n in space.choices if not KNOBS[n].needs_workers]
        with_workers = [n for n in space.choices if KNOBS[n].needs_workers]
        values = {n: _value_array(n, space.choices[n]) for n in space.choices}
        base = np.indices([len(space.choices[n]) for n in names]).reshape(len(names), -1)
        worker_index = base[names.index("num_workers")]
        has_workers = values["num_workers"][worker_index] > 0
        extra = np.indices([len(space.choices[n]) for n in with_workers]).reshape(
            len(with_workers), -1
        )
        per_row = np.where(has_workers, extra.shape[1], 1)
        rows = np.repeat(np.arange(base.shape[1]), per_row)
        # For each row with workers, every combination of the workers-only knobs, in order.
        offsets = np.arange(len(rows)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
        columns: dict[str, Any] = {}
        for i, name in enumerate(names):
            columns[name] = values[name][base[i][rows]]
        workers_on = columns["num_workers"] > 0
        for i, name in enumerate(with_workers):
            picked = values[name][extra[i][offsets]]
            columns[name] = np.where(workers_on, picked, 0)
        prefetch = columns["prefetch_factor"].astype(np.int64)
        columns["prefetch_factor"] = np.where(
            workers_on & (prefetch == 0), TORCH_DEFAULT_PREFETCH_FACTOR, prefetch
        )
        columns["persistent_workers"] = columns["persistent_workers"].astype(bool)
        columns["grad_accum_steps"] = (
            np.ones(len(rows), dtype=np.int64)
            if space.effective_batch is None
            else space.effective_batch // columns["batch_size"]
        )
        return cls(**{name: columns[name] for name in cls.__dataclass_fields__})


def _value_array(name: str, choices: Sequence[Any]) -> npt.NDArray[Any]:
    """A knob's choices as numbers: precision as its index, null as 0 (tf32: not forced)."""
    if name == "amp":
        return np.array([_AMPS.index(v) for v in choices], dtype=np.int64)
    if name == "compile":
        return np.array([_COMPILE_MODES.index(v) for v in choices], dtype=np.int64)
    if name == "tf32":
        return np.array([v is True for v in choices], dtype=bool)
    if name in ("prefetch_factor", "intra_op_threads"):
        return np.array([v or 0 for v in choices], dtype=np.int64)
    if KNOBS[name].is_flag:
        return np.array([bool(v) for v in choices], dtype=bool)
    return np.array(choices, dtype=np.int64)


@dataclass(frozen=True)
class Predictions:
    """Predicted samples/s, memory, uncertainty and bounding side of each configuration."""

    columns: Columns
    samples_per_s: FloatArray
    memory_bytes: FloatArray  # NaN where the profile has no memory model
    over_memory: BoolArray
    uncertainty: FloatArray
    bound: IntArray  # index into BOUNDS
    #: The step's samples/s at each configuration's batch, precision and layout, receiving
    #: and copying its batches included: the bound a free loader leaves.
    step_samples_per_s: FloatArray
    #: The loader's samples/s at each configuration's workers and batch, over whole epochs:
    #: the bound a free step leaves.
    loader_samples_per_s: FloatArray
    #: Per knob the profile does not cover, the configurations that turn it away from what the
    #: profile ran (see :data:`UNCOVERED_KNOB`).
    uncovered: dict[str, BoolArray]

    def __len__(self) -> int:
        return len(self.samples_per_s)

    def values(self, index: int) -> dict[str, Any]:
        """Knob values of configuration ``index`` (for :meth:`SearchSpace.config_from`)."""
        c = self.columns
        workers = int(c.num_workers[index])
        return {
            "batch_size": int(c.batch_size[index]),
            "num_workers": workers,
            "amp": _AMPS[int(c.amp[index])],
            "channels_last": bool(c.channels_last[index]),
            "pin_memory": bool(c.pin_memory[index]),
            "device_prefetch": bool(c.device_prefetch[index]),
            "persistent_workers": bool(c.persistent_workers[index]) and workers > 0,
            "prefetch_factor": int(c.prefetch_factor[index]) or None,
            "cudnn_benchmark": bool(c.cudnn_benchmark[index]),
            "tf32": True if c.tf32[index] else None,
            "compile": _COMPILE_MODES[int(c.compile[index])],
            "retain_freed_memory": bool(c.retain_freed_memory[index]),
            "intra_op_threads": int(c.intra_op_threads[index]) or None,
        }

    def best(self, count: int) -> list[int]:
        """Indices of the ``count`` fastest configurations predicted to fit in memory; of
        equal predictions, the more certain first (the one closer to what the profile ran)."""
        rate = np.where(self.over_memory, -np.inf, self.samples_per_s)
        order = np.lexsort((self.uncertainty, -rate))
        return [int(i) for i in order[:count] if np.isfinite(rate[i])]

    def most_uncertain(self, count: int, among: int | None = None) -> list[int]:
        """Indices of the ``count`` most uncertain configurations that fit, preferring fast
        ones: among the ``among`` fastest (all by default), the highest uncertainty."""
        fits = np.flatnonzero(~self.over_memory)
        if among is not None:
            fits = fits[np.argsort(-self.samples_per_s[fits], kind="stable")[:among]]
        order = fits[np.argsort(-self.uncertainty[fits], kind="stable")]
        return [int(i) for i in order[:count]]

    def uncovered_knobs(self, index: int) -> frozenset[str]:
        """The knobs configuration ``index`` sets otherwise than the profile ran them."""
        return frozenset(name for name, mask in self.uncovered.items() if mask[index])

    def bound_name(self, index: int) -> str:
        return BOUNDS[int(self.bound[index])]


def predict_columns(
    profile: Profile, columns: Columns, memory_budget_bytes: int | None = None
) -> Predictions:
    """Predict each configuration of ``columns``; see the module's description."""
    n = len(columns)
    step_rate, step_cpu, step_unc, copy = np.empty(n), np.empty(n), np.empty(n), np.empty(n)
    step_oom = np.zeros(n, dtype=bool)
    memory = np.full(n, np.nan)
    per_sample_bytes = np.zeros(n)
    keys = columns.amp * 2 + columns.channels_last.astype(np.int64)
    for key in np.unique(keys):
        amp, channels_last = _AMPS[int(key) // 2], bool(int(key) % 2)
        in_combo = keys == key
        model = profile.memory_model(amp, channels_last) or profile.memory_model("off", False)
        for batch in np.unique(columns.batch_size[in_combo]):
            at_batch = in_combo & (columns.batch_size == batch)
            part = _step_part(profile, amp, channels_last, int(batch))
            for threads in np.unique(columns.intra_op_threads[at_batch]):
                where = at_batch & (columns.intra_op_threads == threads)
                on = _on_threads(profile, part, int(threads), amp, channels_last, int(batch))
                step_rate[where], step_cpu[where] = on.samples_per_s, on.cpu_s_per_sample
                step_unc[where], step_oom[where] = on.uncertainty, on.out_of_memory
                copy[where] = on.copy_s
            if model is not None:
                memory[at_batch] = model.predict(float(batch))
                per_sample_bytes[at_batch] = model.per_sample_bytes
    step_rate, step_cpu = _accumulating(profile, columns, step_rate, step_cpu)
    # A step with glibc's defaults faults its freed pages in again each step (see
    # :attr:`Profile.fresh_heap`): slower, by time counted on one core.
    heap = _heap_scale(profile, columns)
    with np.errstate(divide="ignore", invalid="ignore"):
        faulting_s = np.where(heap < 1.0, (1.0 / heap - 1.0) / step_rate, 0.0)
    step_rate, step_cpu = step_rate * heap, step_cpu + faulting_s
    loader_rate, loader_cpu, loader_unc, receive = _loader_columns(
        profile.loader, columns.num_workers
    )

    batch = columns.batch_size.astype(np.float64)
    no_workers = columns.num_workers == 0
    stages = _loader_model(profile)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        loader_rate = np.where(
            no_workers,
            loader_rate,
            _loader_at_batch(loader_rate, columns.num_workers, batch, profile, stages),
        )
        growth = (
            np.ones(n)
            if stages is None
            else stages.receive_growth(batch, profile.loader_batch_size)
        )
        receive = receive * growth
        if stages is not None:
            loader_cpu = loader_cpu * np.where(
                no_workers, 1.0, stages.cpu_growth(batch, profile.loader_batch_size)
            )
        loader_rate = _with_batches_ahead(profile, columns, loader_rate, growth)
        # The training thread receives each batch from the workers and copies it to the
        # device, one after the other with its step. A copy from pinned memory on CUDA does
        # not wait (the loader's pinning thread copies beside it).
        copy = np.where(columns.pin_memory & (profile.device_type == "cuda"), 0.0, copy)
        together = loaded_at_once(profile, columns)
        step_rate = batch / (batch / step_rate + receive + copy)
        epoch_start_s = np.zeros(n)
        if profile.dataset_length:
            loader_rate, epoch_start_s = _over_epochs(
                profile, columns, step_rate, loader_rate, stages
            )
            epoch_start_s = epoch_start_s + _fork_copy_s(profile, columns, per_sample_bytes)
        serial = 1.0 / (1.0 / step_rate + 1.0 / loader_rate)
        shared = (
            float(profile.cpu_count) / (step_cpu + loader_cpu)
            if profile.device_type == "cpu"
            else np.full(n, np.inf)
        )
        beside = _beside_workers(profile, columns, step_rate, loader_cpu, together)
        cpu_bound = np.minimum(shared, beside)
        # Workers beside a step on every core always cost it a little: the cores are named the
        # bound only where they cost the step more than its prediction's own uncertainty.
        named = np.where(cpu_bound < (1.0 - BASE_UNCERTAINTY) * step_rate, cpu_bound, np.inf)
        bound = np.argmin(np.stack([step_rate, loader_rate, named]), axis=0).astype(np.int64)
        # The workers were timed with the cores to themselves; beside the step they wait for
        # a core whenever it is busy, so the loader slows well before the cores' share binds.
        fed = _soft_min(np.stack([loader_rate, cpu_bound]), SHARED_CORES_POWER)
        rate = np.where(
            no_workers, np.minimum(serial, cpu_bound), _soft_min(np.stack([step_rate, fed]))
        )
        if profile.dataset_length:
            epoch = _epoch_samples(profile.dataset_length, columns.batch_size)
            rate = epoch / (epoch / rate + epoch_start_s)
    bound = np.where(
        no_workers & (step_rate < loader_rate) & (serial <= cpu_bound),
        _STEP,
        np.where(no_workers & (serial <= cpu_bound), _LOADER, bound),
    )

    memory = memory + _loader_memory(profile, columns)
    over = step_oom.copy()
    if memory_budget_bytes is not None:
        over |= np.nan_to_num(memory, nan=0.0) > memory_budget_bytes
    bound = np.where(over, _MEMORY, bound)
    uncovered = _uncovered_knobs(profile, columns)
    uncertainty = np.maximum(step_unc, loader_unc) + sum(
        (UNCOVERED_KNOB[name] * mask for name, mask in uncovered.items()), np.zeros(n)
    )
    return Predictions(
        columns=columns,
        samples_per_s=rate,
        memory_bytes=memory,
        over_memory=over,
        uncertainty=np.minimum(1.0, uncertainty),
        bound=bound,
        step_samples_per_s=step_rate,
        loader_samples_per_s=loader_rate,
        uncovered=uncovered,
    )


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


def _threads(profile: Profile, columns: Columns) -> FloatArray:
    """The intra-op threads each configuration's step runs on."""
    return np.where(
        columns.intra_op_threads > 0,
        columns.intra_op_threads,
        profile.default_threads or profile.cpu_count,
    ).astype(np.float64)


def loaded_at_once(profile: Profile, columns: Columns) -> FloatArray:
    """The share of an epoch's batches that every worker loads at once, beside the step.

    A loader faster than the step keeps its queue full, and from then on each batch the step
    takes frees one slot: one worker loads at a time. Only the batches asked for when an epoch
    starts, as many as the workers hold ahead (workers x prefetch factor, at most the epoch),
    are loaded by every worker at once. A loader slower than the step never fills its queue
    and all its workers load all the time, but it bounds the configuration by its own rate:
    the share is taken as above whatever the loader's speed, so that a faster loader never
    lowers a prediction (and as 1 where a dataset's length is unknown).
    On a 2-core EPYC (image-cnn, channels_last, batch 128, three configurations interleaved
    three times, 2026-11-28) 3 workers holding 3 of an epoch's 32 batches trained at 910-951
    samples/s, 2 workers holding all 32 at 1,161-1,216, and 8 holding 16 at 986-1,199; all
    three were predicted at 1,246-1,285, as if every worker always loaded at once.
    """
    if not profile.dataset_length:
        return np.ones(len(columns))
    # Columns hold PyTorch's default prefetch factor wherever there are workers.
    ahead = columns.num_workers * columns.prefetch_factor
    per_epoch = _epoch_steps(profile.dataset_length, columns.batch_size)
    return np.asarray(np.minimum(1.0, ahead / per_epoch), dtype=np.float64)


def _beside_workers(
    profile: Profile,
    columns: Columns,
    step_rate: FloatArray,
    loader_cpu: FloatArray,
    together: FloatArray,
) -> FloatArray:
    """Samples/s of a CPU step that shares the cores with busy loader workers; infinite where
    there are no workers or the device is not a CPU.

    The step's intra-op threads meet at the end of each parallel region, so a worker that takes
    a core from one of them delays all (the straggler). Per sample the workers burn ``b`` CPU
    seconds beside a step of ``a`` seconds on ``n`` threads of ``C`` cores: what fits on the
    cores its threads leave (``C - n``) costs nothing; the rest runs beside the step's threads,
    and ``k`` workers at once (at most one per thread; one where they refill a full queue, see
    :func:`loaded_at_once`, averaged harmonically over the epoch) delay it by ``1/k`` of their
    time. Solving ``t = a + (b - (C - n) t) / k`` gives ``t = (a k + b) / (k + C - n)``. One
    worker beside a step on every core adds its whole CPU time to the step's; as many workers
    as threads spread it over the cores. On a 2-core CPU, image-cnn at batch 32 with one
    worker on PyTorch's threads measured 0.59-0.64 of the cores' share (benchmarks/RESULTS.md
    1b).
    The moments a step on every core leaves idle (its threads waiting for each other, a
    fraction of a millisecond at a time) give a worker nothing: one woken into such a gap
    keeps the core past it, and the step's threads wait for the one it displaced. On a 2-core
    Xeon (image-cnn, bf16, channels_last, batch 32, 2026-12-06) the step kept 1.92 cores busy
    and 1.48 of work; eight workers loading an epoch's 128 batches at its start trained at
    2,999 samples/s where counting those gaps as the workers' predicted 3,590 and not counting
    them 3,045, and one to eight workers refilling the queue at 2,295-2,686 where the 0.08-0.15
    idle cores counted predicted 2,710-2,907 and not counted 2,529-2,604.
    """
    workers = columns.num_workers
    if profile.device_type != "cpu":
        return np.full(len(workers), np.inf)
    every = np.maximum(1.0, np.minimum(workers, _threads(profile, columns)))
    # The share loaded one worker at a time delays the step by all its time: a harmonic mean.
    at_once = 1.0 / (together / every + (1.0 - together))
    idle = np.maximum(0.0, float(profile.cpu_count) - _threads(profile, columns))
    seconds = (at_once / step_rate + loader_cpu) / (at_once + idle)
    return np.where(workers > 0, 1.0 / seconds, np.inf)


#: Sharpness of the soft minimum of the bounds: two equal bounds give 92% of either (the
#: workers and the step never overlap perfectly); a bound twice the other costs 0.05%.
SOFT_MIN_POWER = 8.0


#: Sharpness of the soft minimum of the loader's bound and the cores' share (CPU device): a
#: loader as fast as the share gives 71% of either; one at 0.8 of the share (slow-storage's 48
#: workers on 2 cores) 62% of the share. Replayed over a default slow-storage job on a 2-core
#: EPYC (31 trials, 2026-11-27), its 15 confirmation runs read 0.66-0.96 of their predictions
#: with SOFT_MIN_POWER here (7 within 0.85-1.15) and 0.83-1.12 with this (14; the job is in
#: tests/recorded/). The next slow-storage job, not fitted on: 0.54-0.94 (median 0.66) and
#: 0.67-0.95 (0.84). Image-cnn and text-transformer jobs on that machine, bound by the step
#: and the cores, replayed within 0.01 of before (median of each job's runs).
SHARED_CORES_POWER = 2.0


def _soft_min(bounds: FloatArray, power: float = SOFT_MIN_POWER) -> FloatArray:
    """``(sum b^-p)^(-1/p)`` over the bounds (axis 0): never above the smallest, and the closer
    the others come to it the further below."""
    smallest = np.min(bounds, axis=0)
    scaled = np.where(np.isfinite(bounds), smallest / bounds, 0.0)
    total = np.sum(scaled**power, axis=0)
    return np.asarray(smallest / total ** (1.0 / power), dtype=np.float64)


@dataclass(frozen=True)
class _BatchCost:
    """Seconds per batch: a part per batch plus a part per sample."""

    fixed_s: float
    per_sample_s: float

    @classmethod
    def through(cls, small: float, small_s: float, large: float, large_s: float) -> _BatchCost:
        """The line through two (batch, seconds) points, neither part below zero."""
        per_sample = max(0.0, (large_s - small_s) / (large - small))
        fixed = max(0.0, small_s - per_sample * small)
        return cls(fixed, (small_s - fixed) / small)

    def seconds(self, batch: FloatArray) -> FloatArray:
        return np.asarray(self.fixed_s + self.per_sample_s * batch, dtype=np.float64)

    def at(self, batch: float) -> float:
        return self.fixed_s + self.per_sample_s * batch


@dataclass(frozen=True)
class _LoaderModel:
    """How the loader's rate changes with the batch: workers in parallel, each spending
    :attr:`worker` seconds per batch, and the main process receiving every batch, at most
    :attr:`ceiling` (None: no ceiling seen). Only ratios between batch sizes are used: the
    sweep's rate at its own batch, per worker count, stays the measured one."""

    worker: _BatchCost
    ceiling: _BatchCost | None
    #: The main process's CPU seconds to receive a batch; None: not timed at two batch sizes
    #: (then taken as the sweep's, whatever the batch).
    receive: _BatchCost | None
    #: CPU seconds the loader burns per batch, its workers' and the main process's together,
    #: from the fewest workers timed at two batch sizes; None: not timed so (then the sweep's
    #: per sample, whatever the batch).
    cpu: _BatchCost | None

    def shape(self, workers: IntArray, batch: FloatArray) -> FloatArray:
        rate = workers * batch / self.worker.seconds(batch)
        if self.ceiling is None:
            return np.asarray(rate, dtype=np.float64)
        return _soft_min(np.stack([rate, batch / self.ceiling.seconds(batch)]))

    def receive_growth(self, batch: FloatArray, profiled_batch: float) -> FloatArray:
        """How much longer the main process takes to receive a batch of ``batch`` than one of
        the sweep's."""
        if self.receive is None or not self.receive.at(profiled_batch):
            return np.ones_like(batch)
        return self.receive.seconds(batch) / self.receive.at(profiled_batch)

    def cpu_growth(self, batch: FloatArray, profiled_batch: float) -> FloatArray:
        """The loader's CPU seconds per sample at ``batch`` over those at the sweep's batch:
        below 1 for larger batches, whose cost per batch (collating, handing the batch over)
        is shared by more samples; from the fewest workers timed at two batch sizes (their
        windows hold the most batches). On a 2-core Xeon image-cnn's loader burned 0.10-0.11
        ms a sample with one worker at batch 32 and 0.071-0.077 at batch 256 (five windows
        each): 0.7 of it. Eight workers at batch 192 read 0.033-0.089 in windows of one round."""
        if self.cpu is None or not self.cpu.at(profiled_batch):
            return np.ones_like(batch)
        return np.asarray(
            self.cpu.seconds(batch) / batch / (self.cpu.at(profiled_batch) / profiled_batch),
            dtype=np.float64,
        )


def _loader_model(profile: Profile) -> _LoaderModel | None:
    """The loader's two stages from the profile; None without a worker count timed.

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
    small = float(profile.loader_batch_size)
    with_workers = sorted((p for p in profile.loader if p.num_workers), key=lambda p: p.num_workers)
    if not with_workers:
        return None
    fewest = with_workers[0]
    fewest_s = fewest.num_workers * small / fewest.samples_per_s
    again, again_batch = profile.loader_fewest_workers, profile.loader_fewest_workers_batch_size
    split_measured, cpu = False, None
    if again is not None and again_batch is not None and again.num_workers == fewest.num_workers:
        split_measured = True
        worker = _BatchCost.through(
            small,
            fewest_s,
            float(again_batch),
            again.num_workers * again_batch / again.samples_per_s,
        )
        cpu = _BatchCost.through(
            small,
            fewest.cpu_s_per_sample * small,
            float(again_batch),
            again.cpu_s_per_sample * again_batch,
        )
    else:
        fixed = min(fewest.main_cpu_s_per_batch or 0.0, fewest_s / 2)
        worker = _BatchCost(fixed, (fewest_s - fixed) / small)
    best = max(with_workers, key=lambda p: p.samples_per_s)
    best_s = small / best.samples_per_s
    large, large_batch = profile.loader_large_batch, profile.loader_large_batch_size
    paired = (
        None
        if large is None
        else next((p for p in with_workers if p.num_workers == large.num_workers), None)
    )
    if large is None or large_batch is None or paired is None:
        fixed = min(best.main_cpu_s_per_batch or 0.0, best_s)
        return _LoaderModel(worker, _BatchCost(fixed, (best_s - fixed) / small), None, cpu)
    receive = None
    if paired.main_cpu_s_per_batch and large.main_cpu_s_per_batch:
        receive = _BatchCost.through(
            small, paired.main_cpu_s_per_batch, float(large_batch), large.main_cpu_s_per_batch
        )
    count = np.array([paired.num_workers])
    at_small = _soft_min(
        np.stack([count * small / worker.at(small), np.array([best.samples_per_s])])
    )[0]
    wanted = large.samples_per_s * at_small / paired.samples_per_s
    workers_rate = paired.num_workers * large_batch / worker.at(large_batch)
    if wanted < workers_rate:
        ceiling = (wanted**-SOFT_MIN_POWER - workers_rate**-SOFT_MIN_POWER) ** (
            -1.0 / SOFT_MIN_POWER
        )
        return _LoaderModel(
            worker,
            _BatchCost.through(small, best_s, float(large_batch), large_batch / ceiling),
            receive,
            cpu,
        )
    if split_measured:  # the ceiling does not bind at that count; its pair adds nothing
        return _LoaderModel(worker, None, receive, cpu)
    paired_s = paired.num_workers * small / paired.samples_per_s
    return _LoaderModel(
        _BatchCost.through(
            small,
            paired_s,
            float(large_batch),
            large.num_workers * large_batch / large.samples_per_s,
        ),
        None,
        receive,
        cpu,
    )


def _loader_at_batch(
    rate: FloatArray,
    workers: IntArray,
    batch: FloatArray,
    profile: Profile,
    stages: _LoaderModel | None,
) -> FloatArray:
    """The loader's samples/s at ``batch`` from its measured rate at the profiled batch size,
    scaled as ``stages`` (the profile's :func:`_loader_model`) says."""
    if stages is None:
        return rate
    profiled = np.full(len(batch), float(profile.loader_batch_size))
    return np.asarray(
        rate * stages.shape(workers, batch) / stages.shape(workers, profiled), dtype=np.float64
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
    timed that count at (the rate every prediction starts from): seconds apart on a machine
    whose speed moves, the sweep and the timing one ahead read a count's rate apart, and the
    wait in seconds would then gain that count more or less than it gained where it was
    timed (8 workers of uneven reads gained 1.77x timed, and were predicted 1.98x)."""
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
    count timed the gain is that count's (simulated rounds of uneven reads gain 1.23x with 4
    workers, 1.33x with 8 and 1.36x with 24: the waits overlap); at most 2x."""
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


def _epoch_steps(dataset_length: int, batch_size: IntArray) -> IntArray:
    """Steps an epoch trains: whole batches only (trials drop the last partial one)."""
    return np.asarray(np.maximum(1, dataset_length // batch_size), dtype=np.int64)


def _epoch_samples(dataset_length: int, batch_size: IntArray) -> FloatArray:
    """Samples an epoch trains on: its steps' whole batches."""
    return np.asarray(_epoch_steps(dataset_length, batch_size) * batch_size, dtype=np.float64)


def _over_epochs(
    profile: Profile,
    columns: Columns,
    step_rate: FloatArray,
    loader_rate: FloatArray,
    stages: _LoaderModel | None,
) -> tuple[FloatArray, FloatArray]:
    """The loader's samples/s over whole epochs, and the seconds each epoch adds beyond its
    steady state.

    The workers share an epoch's batches out one each per round: the epoch takes its full
    rounds, then a last round of the batches left (as fast as that many workers deliver), and
    workers beyond the epoch's batch count have nothing to do (batch 256 of 4,096 samples keeps
    16 of 48 workers busy). Each epoch also fills and drains the pipeline: the step waits for
    the first round, or the loader for the last step, whichever the slower side does not hide.
    Without persistent workers it also starts the workers again (the loader sweep's start
    seconds per worker). Configurations without workers are returned unchanged.
    """
    batch = columns.batch_size.astype(np.float64)
    workers = columns.num_workers
    steps = _epoch_steps(profile.dataset_length or 0, columns.batch_size)
    epoch = _epoch_samples(profile.dataset_length or 0, columns.batch_size)
    rounds, left = np.divmod(steps, np.maximum(1, workers))
    round_s = workers * batch / loader_rate
    left_rate = _loader_rates(profile, np.maximum(1, left), batch, stages)
    left_s = np.where(left > 0, left * batch / left_rate, 0.0)
    loader_s = rounds * round_s + left_s
    step_s = epoch / step_rate
    first_s = np.where(rounds > 0, round_s, left_s)
    fill_s = np.maximum(loader_s + batch / step_rate, first_s + step_s) - np.maximum(
        loader_s, step_s
    )
    has_workers = workers > 0
    restart_s = np.where(
        ~columns.persistent_workers, workers * _restart_s_per_worker(profile.loader), 0.0
    )
    return (
        np.where(has_workers, epoch / loader_s, loader_rate),
        np.where(has_workers, fill_s + restart_s, 0.0),
    )


def _fork_copy_s(profile: Profile, columns: Columns, per_sample_bytes: FloatArray) -> FloatArray:
    """Seconds an epoch's first step spends copying the pages it shares with the workers just
    forked (see :class:`ForkCopyPoint`), for configurations that start their workers each
    epoch in the heap the profile timed it in (retaining freed memory): the faults timed at its
    batch, plus the memory model's pages per sample for each sample more, at the cost timed.
    Elsewhere 0: a heap with glibc's defaults hands a step's large blocks back and maps them
    afresh, which copies none of them (text-transformer at batch 192 with two workers on a
    2-core EPYC: 0.3 s against 2.0 s retaining)."""
    point = profile.fork_copy
    if point is None:
        return np.zeros(len(columns))
    batch = columns.batch_size.astype(np.float64)
    pages = np.maximum(
        0.0, point.faults + per_sample_bytes / mmap.PAGESIZE * (batch - point.batch_size)
    )
    starts_workers = (
        (columns.num_workers > 0)
        & ~columns.persistent_workers
        & (columns.retain_freed_memory == profile.retained_freed_memory)
    )
    return np.where(starts_workers, pages * point.fault_s, 0.0)


def _loader_columns(
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


def _loader_rates(
    profile: Profile, workers: IntArray, batch: FloatArray, stages: _LoaderModel | None
) -> FloatArray:
    """The loader's samples/s with ``workers`` (each at least 1) at ``batch``."""
    rate, _, _, _ = _loader_columns(profile.loader, workers)
    return _loader_at_batch(rate, workers, batch, profile, stages)


def _restart_s_per_worker(points: Sequence[LoaderPoint]) -> float:
    """Seconds to start one worker (the median over the measured worker counts; the main
    process starts them one after another)."""
    per_worker = [
        p.restart_s / p.num_workers for p in points if p.num_workers and p.restart_s is not None
    ]
    return float(np.median(per_worker)) if per_worker else 0.0


def _loader_memory(profile: Profile, columns: Columns) -> FloatArray:
    """Memory the configuration adds beyond the step: on a CPU the workers and the batches
    they hold ahead; on CUDA the batch a device prefetch holds."""
    batch_bytes = columns.batch_size * float(profile.sample_bytes)
    if profile.device_type == "cuda":
        return np.where(columns.device_prefetch, batch_bytes, 0.0)
    workers = columns.num_workers.astype(np.float64)
    ahead = workers * columns.prefetch_factor * batch_bytes
    return workers * profile.worker_memory_bytes + ahead


def _heap_scale(profile: Profile, columns: Columns) -> FloatArray:
    """The share of the profiled step's speed each configuration's heap allows: the
    profile's fresh-heap ratio at its precision (the first timed where its own was not: the
    profile times only the first) where it keeps glibc's defaults and the profile retained
    freed memory, else 1."""
    scale = np.ones(len(columns))
    if not profile.fresh_heap or not profile.retained_freed_memory:
        return scale
    ratios: dict[str, float] = {point.amp: point.ratio for point in profile.fresh_heap}
    fallback = profile.fresh_heap[0].ratio
    for index, amp in enumerate(_AMPS):
        where = (columns.amp == index) & ~columns.retain_freed_memory
        scale[where] = ratios.get(amp, fallback)
    return scale


def _heap_uncovered(profile: Profile, columns: Columns) -> BoolArray:
    """Configurations whose handling of freed memory the profile did not time: with a
    fresh-heap ratio, the step is timed both ways but the workers only as the profile ran."""
    differs = columns.retain_freed_memory != profile.retained_freed_memory
    if profile.fresh_heap:
        differs &= columns.num_workers > 0
    return differs


def _uncovered_knobs(profile: Profile, columns: Columns) -> dict[str, BoolArray]:
    """For each knob of :data:`UNCOVERED_KNOB`, the configurations that set it otherwise than
    the profile ran it."""
    has_workers = columns.num_workers > 0
    return {
        "pin_memory": columns.pin_memory,
        "device_prefetch": columns.device_prefetch,
        "cudnn_benchmark": columns.cudnn_benchmark,
        "tf32": columns.tf32,
        "compile": columns.compile > 0,
        "persistent_workers": columns.persistent_workers & has_workers,
        "prefetch_factor": has_workers
        & (columns.prefetch_factor != PROFILED_PREFETCH)
        & (columns.prefetch_factor != _timed_ahead(profile)),
        "retain_freed_memory": _heap_uncovered(profile, columns),
    }


def _timed_ahead(profile: Profile) -> int:
    """The prefetch factor the profile timed besides the sweep's (0: none)."""
    ahead = profile.loader_prefetch
    return (ahead.prefetch_factor or 0) if ahead is not None else 0


def predict_space(
    profile: Profile, space: SearchSpace, memory_budget_bytes: int | None = None
) -> Predictions:
    """Predict every configuration of ``space``."""
    return predict_columns(profile, Columns.of_space(space), memory_budget_bytes)


def predict_configs(
    profile: Profile, configs: Sequence[Config], memory_budget_bytes: int | None = None
) -> Predictions:
    """Predict the given configurations (any, on the grid or off it)."""
    return predict_columns(profile, Columns.of(configs), memory_budget_bytes)


def ranking(
    predictions: Predictions, space: SearchSpace, count: int | None = None
) -> list[tuple[Config, float]]:
    """Configurations by predicted samples/s, fastest first, those over memory left out."""
    indices = predictions.best(count if count is not None else len(predictions))
    return [
        (space.config_from(predictions.values(i)), float(predictions.samples_per_s[i]))
        for i in indices
    ]
