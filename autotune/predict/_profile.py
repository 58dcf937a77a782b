"""The profile of a workload on a device: what the step and the loader can each do alone.

Measured once per job in a fresh trial process (by :mod:`autotune.measure`), stored on the
job, and read by :mod:`autotune.predict._predict` to predict every configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from autotune.space import AmpMode


def running_median(values: Sequence[float]) -> list[float]:
    """Each value but the first and last replaced by the median of itself and its two
    neighbours (Tukey's running median of 3): a lone point off its curve is read as its
    neighbours say, while a rise, a fall or a level shared by two points in a row stays.

    The step's points are short windows, one per batch and sweep, and a busy machine moves one
    by tens of percent: read alone, a lone fast point draws every predicted seed to its batch.
    Read through its neighbours, trials land closer to their predictions (evidence:
    ``benchmarks/log/``).
    """
    return [
        values[i] if i in (0, len(values) - 1) else sorted(values[i - 1 : i + 2])[1]
        for i in range(len(values))
    ]


def step_curve(points: Sequence[StepPoint]) -> list[StepPoint]:
    """The points of one precision and layout that ran, by ascending batch, each with its
    rate read through :func:`running_median` (its CPU time per sample kept as measured)."""
    ran = sorted((p for p in points if p.samples_per_s), key=lambda p: p.batch_size)
    rates = running_median([float(p.samples_per_s or 0.0) for p in ran])
    return [
        point
        if rate == point.samples_per_s
        else point.model_copy(update={"samples_per_s": rate, "cpu_cores": _cores_at(point, rate)})
        for point, rate in zip(ran, rates, strict=True)
    ]


def _cores_at(point: StepPoint, rate: float) -> float | None:
    """The cores ``point`` would keep busy at ``rate`` with its CPU seconds per sample."""
    per_sample = point.cpu_s_per_sample
    return None if per_sample is None else per_sample * rate


class StepPoint(BaseModel):
    """Forward, backward and optimizer step alone, on batches already on the device."""

    model_config = ConfigDict(frozen=True)

    batch_size: int
    amp: AmpMode
    channels_last: bool = False
    #: Samples per second of the step alone; None when it did not run (out of memory).
    samples_per_s: float | None = None
    #: On a CPU device: process CPU seconds per wall second while the step ran (cores busy).
    cpu_cores: float | None = None
    #: Seconds to put one batch of this size on the device as a trial does without pinned
    #: memory (a synchronous copy, and the layout change to channels_last): host time the
    #: training thread spends per step beside the step itself. None in older profiles.
    copy_s: float | None = None
    #: Peak memory with this batch: device allocations on CUDA, the process's peak RSS on a CPU.
    peak_memory_bytes: int | None = None
    out_of_memory: bool = False
    #: The intra-op threads the step ran on (``torch.set_num_threads``); None: PyTorch's
    #: default, one per physical core.
    threads: int | None = None

    @property
    def cpu_s_per_sample(self) -> float | None:
        """CPU seconds the step burns per sample (CPU device only)."""
        if self.cpu_cores is None or not self.samples_per_s:
            return None
        return self.cpu_cores / self.samples_per_s


class LoaderPoint(BaseModel):
    """What the DataLoader alone delivers with one worker count (batches pulled, not used)."""

    model_config = ConfigDict(frozen=True)

    num_workers: int
    samples_per_s: float
    #: Batches each worker held ahead (None without workers). The sweep holds one.
    prefetch_factor: int | None = 1
    #: CPU seconds per sample of the loading process and its workers together.
    cpu_s_per_sample: float
    #: CPU seconds the main process spends per batch receiving it from the workers (taking it
    #: off the queue, rebuilding its tensors): time the training step's thread cannot step.
    main_cpu_s_per_batch: float | None = None
    #: Memory (PSS) of the loading process and its workers while they ran.
    memory_bytes: int | None = None
    #: Seconds the main process spent starting the workers (``iter(loader)``): what each
    #: epoch pays again without ``persistent_workers``.
    restart_s: float | None = None


class MemoryModel(BaseModel):
    """``bytes = fixed_bytes + per_sample_bytes * batch`` for one precision and layout."""

    model_config = ConfigDict(frozen=True)

    amp: AmpMode
    channels_last: bool = False
    fixed_bytes: float
    per_sample_bytes: float
    #: Batch sizes the fit was made from.
    fitted_batches: list[int]

    def predict(self, batch_size: float) -> float:
        """Predicted peak bytes with ``batch_size`` samples per step."""
        return self.fixed_bytes + self.per_sample_bytes * batch_size

    @classmethod
    def fit(
        cls, amp: AmpMode, channels_last: bool, points: Sequence[tuple[int, int]]
    ) -> MemoryModel | None:
        """Least squares over ``(batch, bytes)`` points; None with fewer than one point.

        One point gives a model with no per-sample cost (a lower bound); the slope is never
        negative, since a larger batch never needs less memory.
        """
        if not points:
            return None
        batches = [float(b) for b, _ in points]
        sizes = [float(s) for _, s in points]
        mean_b, mean_s = sum(batches) / len(batches), sum(sizes) / len(sizes)
        spread = sum((b - mean_b) ** 2 for b in batches)
        slope = 0.0
        if spread > 0:
            slope = max(
                0.0,
                sum((b - mean_b) * (s - mean_s) for b, s in zip(batches, sizes, strict=True))
                / spread,
            )
        return cls(
            amp=amp,
            channels_last=channels_last,
            fixed_bytes=mean_s - slope * mean_b,
            per_sample_bytes=slope,
            fitted_batches=sorted(int(b) for b in batches),
        )


class HeapPoint(BaseModel):
    """The step at one batch and precision in a fresh process's heap with glibc's defaults,
    against the same step retaining freed memory (``retain_freed_memory``).

    A trial is a fresh process: with glibc's defaults it hands the top of its heap back to the
    kernel after each step and faults those pages in again at the next. The profile's one
    process, once its sweep has stepped larger batches, does not (glibc's thresholds have risen
    past what a step frees), so its points are the speed of retained memory; the prediction
    scales the step of configurations with glibc's defaults by :attr:`ratio`.
    """

    model_config = ConfigDict(frozen=True)

    amp: AmpMode
    batch_size: int
    #: Samples/s with glibc's defaults over samples/s retaining freed memory (at most 1): the
    #: step's time retaining plus the extra faults at :attr:`fault_s` each, where timed; else
    #: the two windows' times alone.
    ratio: float
    #: Minor page faults per step of each.
    faults_per_step: float
    retained_faults_per_step: float
    #: The two windows' times alone (at most 1), and the seconds one minor page fault cost
    #: this process; None in older profiles.
    timed_ratio: float | None = None
    fault_s: float | None = None


class ForkCopyPoint(BaseModel):
    """The step right after a process was forked from the profile's, against an ordinary step:
    what workers forked at an epoch's start cost the training process's next step.

    A forked worker shares the main process's pages copy-on-write, so the first step after it
    copies every page of the heap it writes (retaining freed memory, a step writes the heap it
    kept from the last): at large batches, seconds per epoch. A page copied inside a step costs
    several times what a probe copying pages alone reads, so it is timed on the step itself: at
    the smallest batch of the first precision and layout, in the heap the sweep left; the
    faults of a larger batch grow by the memory model's bytes per sample (evidence:
    ``benchmarks/log/``).
    """

    model_config = ConfigDict(frozen=True)

    amp: AmpMode
    channels_last: bool = False
    batch_size: int
    #: Minor page faults the step after the fork took, and its seconds beyond an ordinary step.
    faults: float
    seconds: float

    @property
    def fault_s(self) -> float:
        """Seconds one copied page cost."""
        return self.seconds / self.faults if self.faults > 0 else 0.0


class AccumulationPoint(BaseModel):
    """What accumulating gradients over micro-batches changes in a step, timed at one batch:
    the optimizer step (with zeroing the gradients), which each step point paid once per
    batch and a configuration accumulating over ``k`` micro-batches pays once per ``k``; and
    what a backward adding into the gradients kept takes beyond one writing them afresh
    (after zeroing), which its other micro-steps pay.

    Both are timed: an optimizer over many small tensors costs a CPU step a tenth of its time,
    and the extra backward takes back part of what leaving it out saves, so the optimizer step
    alone would overstate the gain (evidence: ``benchmarks/log/``).
    """

    model_config = ConfigDict(frozen=True)

    amp: AmpMode
    batch_size: int
    optimizer_s: float
    accumulate_s: float

    @property
    def saved_s(self) -> float:
        """Seconds each optimizer step left out saves: the step, less the extra backward."""
        return max(0.0, self.optimizer_s - self.accumulate_s)


class CompilePoint(BaseModel):
    """``torch.compile`` in one mode, timed once at a small batch: its compile seconds and its
    step against the eager step timed beside it.

    A compile costs the same seconds at any batch (the graph is the model's), and what it saves
    a step is read at one batch for all: the predictor scales each configuration's eager step
    by :attr:`ratio` and charges :attr:`compile_s` over the run. A compile that outlasted the
    profile's allowance for it (:attr:`budget_s`, what the job and the run can spend on one)
    keeps that allowance as its seconds, a lower bound, and no ratio.
    """

    model_config = ConfigDict(frozen=True)

    mode: str
    batch_size: int
    amp: AmpMode
    channels_last: bool = False
    #: Seconds the compiling steps took beyond as many compiled steps: at least
    #: :attr:`budget_s` where :attr:`over_budget`.
    compile_s: float
    #: Samples/s of the compiled step and of the eager step timed beside it (None where the
    #: compile did not finish or failed).
    samples_per_s: float | None = None
    eager_samples_per_s: float | None = None
    #: The seconds the profile allowed this compile.
    budget_s: float
    over_budget: bool = False
    #: Why the compiled step could not run (an error), where it could not.
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        """The compiled step's samples/s over the eager step's; None where not timed."""
        if not self.samples_per_s or not self.eager_samples_per_s:
            return None
        return self.samples_per_s / self.eager_samples_per_s


class OptimizerPoint(BaseModel):
    """The step with one optimizer implementation (``foreach`` or ``fused``), timed once at a
    small batch against the step with the workload's optimizer as built (``default``) beside it.

    An implementation changes the optimizer's update, which a step pays once whatever its
    batch: what it saves is seconds per step (:attr:`saved_s`), a smaller share of a larger
    batch's step, so the predictor takes those seconds off each configuration's step (once per
    optimizer step where it accumulates gradients), never more than the share it saved here.
    """

    model_config = ConfigDict(frozen=True)

    impl: str
    batch_size: int
    amp: AmpMode
    channels_last: bool = False
    #: Samples/s of the step with this implementation and with the default beside it (None
    #: where the implementation could not step).
    samples_per_s: float | None = None
    default_samples_per_s: float | None = None
    #: Why the step could not run with this implementation, where it could not.
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        """The step's samples/s with this implementation over the default's; None where not
        timed."""
        if not self.samples_per_s or not self.default_samples_per_s:
            return None
        return self.samples_per_s / self.default_samples_per_s

    @property
    def saved_s(self) -> float | None:
        """Seconds a step saves with this implementation (negative: it costs them); None
        where not timed."""
        if not self.samples_per_s or not self.default_samples_per_s:
            return None
        return self.batch_size / self.default_samples_per_s - self.batch_size / self.samples_per_s


class Profile(BaseModel):
    """The step's capacity per batch/precision/layout, the loader's per worker count, and the
    memory each batch needs: the two bounds of every configuration.

    Its rates, CPU, memory and dataset length are **one rank's**: in a job of several ranks
    the profile runs as those ranks, the step's all-reduce and the other ranks' loaders
    included, and records rank 0. The predictions are global samples/s, the trials' unit:
    :func:`~autotune.predict.predict_columns` multiplies by :attr:`ranks`, the one place the
    unit changes.
    """

    model_config = ConfigDict(frozen=True)

    device_type: str
    #: One rank's share of the host's cores.
    cpu_count: int
    #: The ranks the profile ran as (each stepping and loading as rank 0 did).
    ranks: int = 1
    step: list[StepPoint]
    #: The step again on fewer intra-op threads (CPU only, the counts the space searches), at
    #: a few batches of each precision and layout: how much of its speed the other cores give.
    step_threads: list[StepPoint] = []
    #: The intra-op threads the step sweep ran on (PyTorch's default: a thread per physical
    #: core, fewer than :attr:`cpu_count` where cores run two threads); None in older profiles.
    default_threads: int | None = None
    loader: list[LoaderPoint]
    memory: list[MemoryModel]
    #: The batch size of the loader sweep (the workload's own, within the dataset).
    loader_batch_size: int
    #: The loader's fastest worker count (whose epoch holds enough larger batches) timed again
    #: at this larger batch: how the main process's cost of receiving each batch grows with it
    #: (the loader's ceiling); None where no larger batch fitted, and in older profiles.
    loader_large_batch_size: int | None = None
    loader_large_batch: LoaderPoint | None = None
    #: The sweep's fewest workers (one, unless the user fixed the count) timed again at this
    #: larger batch: how a worker's own time per batch splits into a part per batch and a part
    #: per sample. None where no larger batch fitted, and in older profiles.
    loader_fewest_workers_batch_size: int | None = None
    loader_fewest_workers: LoaderPoint | None = None
    #: The fastest worker count whose epoch holds enough batches, timed again at the sweep's
    #: batch with one batch ahead per worker (as the sweep) and right after with two
    #: (PyTorch's default): how long a worker with one ahead waits for the main process to
    #: take its batch. None where no count fitted, and in older profiles.
    loader_one_ahead: LoaderPoint | None = None
    loader_prefetch: LoaderPoint | None = None
    #: Samples in one epoch of the dataset; None for a dataset without a length (then epochs
    #: are not modelled: no epoch start, no last round of the workers).
    dataset_length: int | None = None
    #: Seconds to collate one batch of :attr:`loader_batch_size` in the main process.
    collate_s_per_batch: float | None = None
    #: Host bytes of one sample as batched (what each prefetched batch holds per sample).
    sample_bytes: int = 0
    #: Extra memory (PSS) each DataLoader worker adds, from the loader sweep.
    worker_memory_bytes: int = 0
    #: Worker counts beyond the searched grid's cap where the loader kept scaling.
    extra_workers: list[int] = []
    #: Worker counts the space would search (the loader sweep's starting grid).
    grid_max_workers: int = 0
    #: The profile's process kept freed host memory (``retain_freed_memory``) while it ran.
    retained_freed_memory: bool = False
    #: On a CPU with glibc: the step in a fresh process's heap with glibc's defaults against the
    #: step retaining freed memory, timed before the sweep (which then ran retaining it), in
    #: the space's first precision (only the first meets a fresh heap). Empty where the space
    #: holds only one setting, off a CPU with glibc, and in older profiles.
    fresh_heap: list[HeapPoint] = []
    #: On a CPU, retaining freed memory, where the space holds workers started anew each epoch:
    #: what a fork costs the next step. None elsewhere and in older profiles.
    fork_copy: ForkCopyPoint | None = None
    #: Where the space holds configurations accumulating gradients: what accumulating saves
    #: and costs a step (see :class:`AccumulationPoint`). None elsewhere and in older profiles.
    accumulation: AccumulationPoint | None = None
    #: ``torch.compile`` in each mode the space searches, timed once at a small batch (see
    #: :class:`CompilePoint`). Empty where the space does not compile, and in older profiles.
    compile: list[CompilePoint] = []
    #: The step at each optimizer implementation the space searches besides the default, timed
    #: once at a small batch (see :class:`OptimizerPoint`). Empty where the space has none,
    #: and in older profiles.
    optimizer: list[OptimizerPoint] = []
    duration_s: float = 0.0
    budget_s: float = 0.0

    def compile_point(self, mode: str) -> CompilePoint | None:
        """The profile's timing of ``torch.compile`` in ``mode``; None where it has none."""
        return next((p for p in self.compile if p.mode == mode), None)

    def optimizer_point(self, impl: str) -> OptimizerPoint | None:
        """The profile's timing of the step with optimizer implementation ``impl``; None where
        it has none."""
        return next((p for p in self.optimizer if p.impl == impl), None)

    def thread_points(self, threads: int, amp: str, channels_last: bool) -> list[StepPoint]:
        """The step's points on ``threads`` intra-op threads, by ascending batch."""
        return sorted(
            (
                p
                for p in self.step_threads
                if p.threads == threads
                and p.amp == amp
                and p.channels_last == channels_last
                and p.samples_per_s
            ),
            key=lambda p: p.batch_size,
        )

    def step_points(self, amp: str, channels_last: bool) -> list[StepPoint]:
        """The measured step points of one precision and layout, by ascending batch."""
        return sorted(
            (p for p in self.step if p.amp == amp and p.channels_last == channels_last),
            key=lambda p: p.batch_size,
        )

    def memory_model(self, amp: str, channels_last: bool) -> MemoryModel | None:
        for model in self.memory:
            if model.amp == amp and model.channels_last == channels_last:
                return model
        return None

    def step_curves(self) -> list[StepPoint]:
        """The step points that ran, each precision and layout's read as one curve (see
        :func:`step_curve`): the rates the predictor reads."""
        combos = dict.fromkeys((p.amp, p.channels_last) for p in self.step)
        return [
            point
            for amp, channels_last in combos
            for point in step_curve(self.step_points(amp, channels_last))
        ]

    def best_step(self) -> StepPoint | None:
        """The fastest step point on its curve (see :func:`step_curve`): a lone fast window
        is not the step's ceiling, as it is not what the predictor reads."""
        return max(self.step_curves(), key=lambda p: p.samples_per_s or 0.0, default=None)

    def best_loader(self) -> LoaderPoint | None:
        """The worker count that delivered the most samples per second."""
        return max(self.loader, key=lambda p: p.samples_per_s) if self.loader else None

    def public_dict(self) -> dict[str, object]:
        """The profile as the recommendation JSON shows it: each step point as measured and
        on its curve (``curve_samples_per_s``, see :func:`step_curve`), the rate the predictor
        and the diagnosis read."""
        curve = {
            (p.batch_size, p.amp, p.channels_last): p.samples_per_s for p in self.step_curves()
        }
        return {
            "step": [
                {
                    "batch_size": p.batch_size,
                    "amp": p.amp,
                    "channels_last": p.channels_last,
                    "samples_per_s": p.samples_per_s,
                    "curve_samples_per_s": curve.get((p.batch_size, p.amp, p.channels_last)),
                    "copy_s": p.copy_s,
                    "peak_memory_bytes": p.peak_memory_bytes,
                    "out_of_memory": p.out_of_memory,
                }
                for p in self.step
            ],
            "step_threads": [
                {
                    "threads": p.threads,
                    "batch_size": p.batch_size,
                    "amp": p.amp,
                    "channels_last": p.channels_last,
                    "samples_per_s": p.samples_per_s,
                }
                for p in self.step_threads
            ],
            "loader": [
                {
                    "num_workers": p.num_workers,
                    "samples_per_s": p.samples_per_s,
                    "cpu_s_per_sample": p.cpu_s_per_sample,
                    "restart_s": p.restart_s,
                }
                for p in self.loader
            ],
            "loader_batch_size": self.loader_batch_size,
            "loader_large_batch": None
            if self.loader_large_batch is None
            else {
                "batch_size": self.loader_large_batch_size,
                "num_workers": self.loader_large_batch.num_workers,
                "samples_per_s": self.loader_large_batch.samples_per_s,
            },
            "loader_fewest_workers": None
            if self.loader_fewest_workers is None
            else {
                "batch_size": self.loader_fewest_workers_batch_size,
                "num_workers": self.loader_fewest_workers.num_workers,
                "samples_per_s": self.loader_fewest_workers.samples_per_s,
            },
            "loader_prefetch": None
            if self.loader_prefetch is None
            else {
                "prefetch_factor": self.loader_prefetch.prefetch_factor,
                "num_workers": self.loader_prefetch.num_workers,
                "samples_per_s": self.loader_prefetch.samples_per_s,
                "one_ahead_samples_per_s": None
                if self.loader_one_ahead is None
                else self.loader_one_ahead.samples_per_s,
            },
            "dataset_length": self.dataset_length,
            # Its rates are one rank's of these (the predictions are global).
            "ranks": self.ranks,
            "memory": [
                {
                    "amp": m.amp,
                    "channels_last": m.channels_last,
                    "fixed_bytes": int(m.fixed_bytes),
                    "per_sample_bytes": int(m.per_sample_bytes),
                }
                for m in self.memory
            ],
            "extra_workers": list(self.extra_workers),
            "retained_freed_memory": self.retained_freed_memory,
            "fresh_heap": [p.model_dump() for p in self.fresh_heap],
            "fork_copy": None if self.fork_copy is None else self.fork_copy.model_dump(),
            "accumulation": (None if self.accumulation is None else self.accumulation.model_dump()),
            "compile": [p.model_dump() for p in self.compile],
            "optimizer": [p.model_dump() for p in self.optimizer],
            "duration_s": self.duration_s,
        }


def public_profile(stored: dict[str, Any] | None) -> dict[str, object] | None:
    """A job's stored profile as the recommendation JSON and the API show it; None without."""
    return Profile.model_validate(stored).public_dict() if stored else None
