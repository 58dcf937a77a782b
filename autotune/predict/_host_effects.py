"""The CPU host's effects on a prediction: glibc's heap, fork copy-on-write, shared cores.

On a CPU device the step, the loader's workers and the main process share the host, and three
things the step and the loader timed alone leave out change a configuration's speed:

- glibc's heap: with its defaults a step hands its large freed blocks back and faults them in
  afresh each step, slower than a heap that retains freed memory (:func:`_heap_scale`);
- fork copy-on-write: workers started each epoch share the training process's pages, and the
  epoch's first step copies those it writes (:func:`_fork_copy_s`);
- shared cores: the step and the workers split the cores, and a worker beside a step on every
  core delays it (:func:`_beside_workers`, :data:`SHARED_CORES_POWER`).

:func:`host_effects` is the predictor's one call for all three. On a CUDA device the step runs
on the GPU and the profile times none of them, so it returns the step unchanged, no epoch
start and no bound from the cores.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, replace

import numpy as np

from autotune.predict._columns import AMPS, Columns, FloatArray, epoch_steps
from autotune.predict._loader import LoaderColumns
from autotune.predict._profile import Profile
from autotune.predict._soft_min import soft_min
from autotune.predict._step import StepColumns

#: The device whose host effects the predictor models.
HOST_DEVICE = "cpu"

#: Sharpness of the soft minimum of the loader's bound and the cores' share (CPU device): a
#: loader as fast as the share gives 71% of either; one at 0.8 of the share 62% of the share.
#: The workers were timed with the cores to themselves; beside the step they wait for a core
#: whenever it is busy, so the loader slows well before the cores' share binds, more gently
#: than two bounds that merely overlap (:data:`SOFT_MIN_POWER`). Evidence: recorded jobs in
#: ``tests/recorded/`` and ``benchmarks/log/``.
SHARED_CORES_POWER = 2.0


def models_host_effects(device_type: str) -> bool:
    """Whether the predictor models the host's heap, forks and cores on ``device_type``: only
    where the step itself runs on the host's cores."""
    return device_type == HOST_DEVICE


@dataclass(frozen=True)
class HostEffects:
    """The host's effects on each configuration (see the module's description)."""

    #: The step as the configuration's heap lets it run.
    step: StepColumns
    #: Seconds each epoch's start adds copying the pages shared with workers just forked.
    epoch_start_s: FloatArray
    #: Samples/s the shared cores allow (infinite where they set no bound).
    cores_samples_per_s: FloatArray

    def loader_beside_step(self, loader_rate: FloatArray) -> FloatArray:
        """The loader's samples/s beside the step: the soft minimum of its own rate and the
        cores' share (:data:`SHARED_CORES_POWER`); its own where the cores set no bound."""
        return soft_min(np.stack([loader_rate, self.cores_samples_per_s]), SHARED_CORES_POWER)


def host_effects(
    profile: Profile, columns: Columns, step: StepColumns, loader: LoaderColumns
) -> HostEffects:
    """The host's effects on the configurations of ``columns`` with the given step and loader;
    none on a device other than a CPU."""
    n = len(columns)
    if not models_host_effects(profile.device_type):
        return HostEffects(step, np.zeros(n), np.full(n, np.inf))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        step = _in_heap(profile, columns, step)
        shared = float(profile.cpu_count) / (step.cpu_s_per_sample + loader.cpu_s_per_sample)
        beside = _beside_workers(
            profile,
            columns,
            step.training_samples_per_s,
            loader.cpu_s_per_sample,
            loaded_at_once(profile, columns),
        )
    return HostEffects(
        step,
        _fork_copy_s(profile, columns, step.per_sample_bytes),
        np.minimum(shared, beside),
    )


def _in_heap(profile: Profile, columns: Columns, step: StepColumns) -> StepColumns:
    """The step where glibc's defaults fault its freed pages in again each step (see
    :attr:`Profile.fresh_heap`): slower, by time counted on one core."""
    heap = _heap_scale(profile, columns)
    faulting_s = np.where(heap < 1.0, (1.0 / heap - 1.0) / step.samples_per_s, 0.0)
    return replace(
        step,
        samples_per_s=step.samples_per_s * heap,
        cpu_s_per_sample=step.cpu_s_per_sample + faulting_s,
    )


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
    for index, amp in enumerate(AMPS):
        where = (columns.amp == index) & ~columns.retain_freed_memory
        scale[where] = ratios.get(amp, fallback)
    return scale


def _fork_copy_s(profile: Profile, columns: Columns, per_sample_bytes: FloatArray) -> FloatArray:
    """Seconds an epoch's first step spends copying the pages it shares with the workers just
    forked (see :class:`ForkCopyPoint`), for configurations that start their workers each
    epoch in the heap the profile timed it in (retaining freed memory): the faults timed at its
    batch, plus the memory model's pages per sample for each sample more, at the cost timed.
    Elsewhere 0: a heap with glibc's defaults hands a step's large blocks back and maps them
    afresh, which copies a small share of what a retaining heap does."""
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


def loaded_at_once(profile: Profile, columns: Columns) -> FloatArray:
    """The share of an epoch's batches that every worker loads at once, beside the step.

    A loader faster than the step keeps its queue full, and from then on each batch the step
    takes frees one slot: one worker loads at a time. Only the batches asked for when an epoch
    starts, as many as the workers hold ahead (workers x prefetch factor, at most the epoch),
    are loaded by every worker at once. A loader slower than the step never fills its queue
    and all its workers load all the time, but it bounds the configuration by its own rate:
    the share is taken as above whatever the loader's speed, so that a faster loader never
    lowers a prediction (and as 1 where a dataset's length is unknown). Counting every worker
    as loading at once all the time predicts configurations whose workers hold a small share
    of the epoch well above what they train at (evidence: ``benchmarks/log/``).
    """
    if not profile.dataset_length:
        return np.ones(len(columns))
    # Columns hold PyTorch's default prefetch factor wherever there are workers.
    ahead = columns.num_workers * columns.prefetch_factor
    per_epoch = epoch_steps(profile.dataset_length, columns.batch_size)
    return np.asarray(np.minimum(1.0, ahead / per_epoch), dtype=np.float64)


def _threads(profile: Profile, columns: Columns) -> FloatArray:
    """The intra-op threads each configuration's step runs on."""
    return np.where(
        columns.intra_op_threads > 0,
        columns.intra_op_threads,
        profile.default_threads or profile.cpu_count,
    ).astype(np.float64)


def _beside_workers(
    profile: Profile,
    columns: Columns,
    step_rate: FloatArray,
    loader_cpu: FloatArray,
    together: FloatArray,
) -> FloatArray:
    """Samples/s of a CPU step that shares the cores with busy loader workers; infinite where
    there are no workers.

    The step's intra-op threads meet at the end of each parallel region, so a worker that takes
    a core from one of them delays all (the straggler). Per sample the workers burn ``b`` CPU
    seconds beside a step of ``a`` seconds on ``n`` threads of ``C`` cores: what fits on the
    cores its threads leave (``C - n``) costs nothing; the rest runs beside the step's threads,
    and ``k`` workers at once (at most one per thread; one where they refill a full queue, see
    :func:`loaded_at_once`, averaged harmonically over the epoch) delay it by ``1/k`` of their
    time. Solving ``t = a + (b - (C - n) t) / k`` gives ``t = (a k + b) / (k + C - n)``. One
    worker beside a step on every core adds its whole CPU time to the step's; as many workers
    as threads spread it over the cores.
    The moments a step on every core leaves idle (its threads waiting for each other, a
    fraction of a millisecond at a time) give a worker nothing: one woken into such a gap
    keeps the core past it, and the step's threads wait for the one it displaced; so only the
    cores its threads leave count as free, not the step's idle moments (evidence:
    ``benchmarks/log/``).
    """
    workers = columns.num_workers
    every = np.maximum(1.0, np.minimum(workers, _threads(profile, columns)))
    # The share loaded one worker at a time delays the step by all its time: a harmonic mean.
    at_once = 1.0 / (together / every + (1.0 - together))
    idle = np.maximum(0.0, float(profile.cpu_count) - _threads(profile, columns))
    seconds = (at_once / step_rate + loader_cpu) / (at_once + idle)
    return np.where(workers > 0, 1.0 / seconds, np.inf)
