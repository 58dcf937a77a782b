"""The measured training loop: warm-up until steady, a timed window, and what the window saw.

The step itself (batches on the device, autocast, backward) is :class:`TrainingStep`, the same
code ``load_recommendation`` hands users. What this module adds is only timing: two clock reads
per step, the loader's ``next()`` timed apart from the copy to the device, and on CUDA two
events per step for the device's own step time, read once the window is over.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from autotune.measure._batches import batch_size_of, first_tensor
from autotune.measure._compile import MAX_COMPILING_STEPS, compilations, fresh_compile_caches
from autotune.measure._step import TrainingStep, WaitClock, forward_loss
from autotune.space import Config
from autotune.workload import Workload

ProgressSink = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class MeasurePlan:
    """How long to warm up and to measure.

    The timed window is the longer of ``min_steps`` and ``min_seconds``, and holds whole
    rounds of the loader's workers (a batch from each), two at least; an epoch of at most
    :data:`WHOLE_EPOCH_ROUNDS` rounds (or ``min_steps`` steps) is timed whole: the window holds
    as many epochs' worth of steps as ``min_seconds`` needs (and ``min_steps``, up to one
    epoch's steps), from wherever the warm-up ended. Warm-up lasts at least
    ``warmup_steps`` and one step per loader worker plus one, then until the batches the
    workers prefetched at start-up are used up and the wait for data has settled (or
    ``max_warmup_s`` has passed).
    """

    warmup_steps: int = 3
    min_steps: int = 10
    min_seconds: float = 3.0
    progress_interval_s: float = 0.5
    seed: int = 0
    max_warmup_s: float = 5.0


@dataclass
class WindowMetrics:
    #: Samples per second over the window, with the epoch restart cost amortised over an epoch.
    samples_per_s: float
    #: Step time: on CUDA the device's (CUDA events around each step), elsewhere the host's.
    step_time_median_ms: float
    step_time_p90_ms: float
    #: Share of the window spent inside the DataLoader's ``next()``, nothing else.
    data_wait_fraction: float
    #: Share of the window the host spent copying batches to the device (on CUDA, including
    #: any wait for the device that a pageable copy implies); 0 on a CPU.
    copy_wait_fraction: float
    steps: int
    warmup_steps: int
    window_s: float
    #: Seconds to get the first batch of a new epoch beyond a normal batch's wait (worker
    #: start-up when ``persistent_workers`` is off), and the epoch length it is amortised over.
    epoch_restart_s: float | None
    steps_per_epoch: int | None
    losses_finite: bool
    peak_memory_allocated_bytes: int | None
    peak_memory_reserved_bytes: int | None
    #: Seconds ``torch.compile`` added to the steps that compiled, beyond an ordinary step;
    #: None when the configuration does not compile. Not part of ``samples_per_s``.
    compile_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class NonFiniteLoss(Exception):
    """A loss became NaN or infinite: the configuration does not train."""


def build_loader(workload: Workload, config: Config, dataset: Any) -> DataLoader[Any]:
    kwargs: dict[str, Any] = {"shuffle": not isinstance(dataset, IterableDataset)}
    kwargs.update(workload.dataloader_kwargs)
    kwargs.update(
        batch_size=config.batch_size,
        num_workers=config.num_workers,
        pin_memory=config.pin_memory,
        drop_last=True,
        collate_fn=workload.collate_fn,
    )
    if config.num_workers > 0:
        kwargs["persistent_workers"] = config.persistent_workers
        if config.prefetch_factor is not None:
            kwargs["prefetch_factor"] = config.prefetch_factor
    return DataLoader(dataset, **kwargs)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def _loader_length(loader: DataLoader[Any]) -> int | None:
    try:
        return len(loader) or None
    except TypeError:  # an iterable dataset without __len__
        return None


class TrainingLoop:
    """One configuration of one workload, ready to step; built inside the trial process.

    Each batch's wait for the loader is kept (:attr:`last_wait_s`), and the waits of the first
    steps of every epoch (:attr:`epoch_start_waits`): until the workers have refilled their
    queue, an epoch's start costs more than its steady state.
    """

    def __init__(self, workload: Workload, config: Config, device: torch.device) -> None:
        self.workload = workload
        self.config = config
        self.device = device
        self.training = TrainingStep(config, device)
        self.model = self.training.prepare_model(workload.model())
        self.model.train()
        self.optimizer = workload.optimizer(self.model.parameters())
        self.loader = build_loader(workload, config, workload.dataset())
        self.steps_per_epoch = _loader_length(self.loader)
        #: Steps at the start of an epoch whose waits make up its start cost: one batch from
        #: each worker (after that round the workers are in their steady rhythm), at most a
        #: quarter of an epoch.
        self.start_steps = max(1, config.num_workers)
        if self.steps_per_epoch is not None:
            self.start_steps = max(1, min(self.start_steps, self.steps_per_epoch // 4))
        self.clock = WaitClock()
        #: Seconds the last batch waited for the loader (for an epoch's first batch, with the
        #: loader's iterator creation: worker start-up), and whether it began an epoch.
        self.last_wait_s = 0.0
        self.last_in_epoch_start = False
        #: Per epoch: the waits of its first :attr:`start_steps` batches.
        self.epoch_start_waits: list[list[float]] = []
        #: Per epoch, on a CPU: the host seconds of its first :attr:`start_steps` steps' own
        #: work (see :attr:`last_step_s`). Workers forked at an epoch's start share the main
        #: process's pages copy-on-write, so its first step faults in a private copy of every
        #: page of the heap it writes: text-transformer at batch 192 with two workers,
        #: retaining freed memory, on a 2-core EPYC took 2.4 s for that step (156,000 faults)
        #: against 0.39 s for the others, and none of it is a wait for data.
        self.epoch_start_steps: list[list[float]] = []
        #: Host seconds of the last :meth:`step` (on CUDA, its launches, not the device's work).
        self.last_step_s = 0.0
        self._epoch: Iterator[Any] = iter(())
        self._epoch_step = 0
        # The sum of the losses since the last check, kept on the device and read only at the
        # check: no device synchronisation per step, and no tensor kept per step. NaN and
        # infinity survive a sum. (A list of the steps' detached losses, hundreds of small live
        # allocations among each step's large freed ones, fragmented the host's heap:
        # text-transformer faulted in 8,000 fresh pages a step, and the runner read 0.85x the
        # benchmark's plain loop.)
        self._loss_sum: torch.Tensor | None = None

    def next_batch(self) -> Any:
        """The next batch on the device, starting a new epoch when one ends."""
        waited = self._exposed_loader_s()
        try:
            batch = next(self._epoch)
            wait = self._exposed_loader_s() - waited
        except StopIteration:
            # The last next() of an epoch shuts its workers down (persistent_workers off): that
            # is part of what the new epoch's first batch waits for.
            ending = self._exposed_loader_s() - waited
            batch, wait = self._first_batch()
            wait += ending
        self.last_wait_s = wait
        self.last_in_epoch_start = self._epoch_step < self.start_steps
        if self.last_in_epoch_start:
            self.epoch_start_waits[-1].append(wait)
        self._epoch_step += 1
        return batch

    def _exposed_loader_s(self) -> float:
        """Loader time so far that did not overlap the device's queued work."""
        return self.clock.loader_s - self.clock.overlapped_s

    def _first_batch(self) -> tuple[Any, float]:
        started = time.perf_counter()
        copied, overlapped = self.clock.copy_s, self.clock.overlapped_s
        self._epoch = self.training.batches(self.loader, self.clock)
        try:
            batch = next(self._epoch)
        except StopIteration:
            raise RuntimeError(
                "the DataLoader yields no batch: the dataset is smaller than batch_size"
            ) from None
        self._epoch_step = 0
        self.epoch_start_waits.append([])
        self.epoch_start_steps.append([])
        return batch, (
            time.perf_counter()
            - started
            - (self.clock.copy_s - copied)
            - (self.clock.overlapped_s - overlapped)
        )

    def start_new_epoch(self) -> None:
        """End the current epoch early: the next batch starts a new one."""
        self._epoch = iter(())

    def step(self, batch: Any) -> int:
        """One micro-step (forward, backward, optimizer on accumulation boundaries)."""
        started = time.perf_counter()
        with self.training.autocast():
            loss = forward_loss(self.workload, self.model, batch)
        self.training.backward(loss, self.optimizer)
        self._add_loss(loss.detach())
        self.last_step_s = time.perf_counter() - started
        if self.last_in_epoch_start and self.device.type == "cpu":
            self.epoch_start_steps[-1].append(self.last_step_s)
        return batch_size_of(batch)

    def _add_loss(self, loss: torch.Tensor) -> None:
        """Add one step's loss to the running sum, in place (no allocation that outlives it)."""
        if self._loss_sum is None:
            self._loss_sum = torch.zeros((), dtype=torch.float32, device=loss.device)
        # A single-element loss of any shape; backward has already refused anything larger.
        self._loss_sum.add_(loss.reshape(()))

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def check_finite(self) -> None:
        """Raise :class:`NonFiniteLoss` when a loss since the last check was NaN or infinite
        (one synchronisation), and start a new sum."""
        total, self._loss_sum = self._loss_sum, None
        if total is not None and not bool(torch.isfinite(total)):
            raise NonFiniteLoss("the loss became NaN or infinite")


def input_batch_ndim(workload: Workload, dataset: Any) -> int:
    """Dimensions of one batch's input tensor (a sample's plus the batch dimension)."""
    sample = next(iter(dataset)) if isinstance(dataset, IterableDataset) else dataset[0]
    inputs = sample[0] if isinstance(sample, (list, tuple)) else sample
    if workload.collate_fn is not None:
        collated = workload.collate_fn([sample])
        inputs = collated[0] if isinstance(collated, (list, tuple)) else collated
        tensor = first_tensor(inputs)
        return int(tensor.dim()) if tensor is not None else 0
    tensor = first_tensor(inputs)
    return int(tensor.dim()) + 1 if tensor is not None else 0


def compile_phase(loop: TrainingLoop) -> tuple[int, float]:
    """Step until a step compiles nothing; the steps taken and their wall time.

    Each step is synchronised, so a step's time includes its device work; the wait for the
    loader is not included. Warm-up starts after this, so compilation never counts towards
    its time bound.
    """
    steps, seconds = 0, 0.0
    while steps < MAX_COMPILING_STEPS:
        batch = loop.next_batch()
        before = compilations()
        started = time.perf_counter()
        loop.step(batch)
        loop.synchronize()
        seconds += time.perf_counter() - started
        steps += 1
        if compilations() == before:
            break
    return steps, seconds


#: An epoch of at most this many rounds of the workers (a batch from each) is timed whole:
#: its start is too large a share of it, and too close to its bursts, to be told apart.
WHOLE_EPOCH_ROUNDS = 4


def collect_setup_garbage() -> None:
    """Run the garbage collector's full collection that setting up left due, before the
    warm-up and the DataLoader's first workers.

    Building the model, the optimizer and the loader leaves many new objects that survive, and
    Python's collector runs a full collection once those reach a quarter of the objects it
    already holds: with torch imported that is a walk of some 350,000 objects, 0.2-0.3 s on a
    2-core CPU, due some seconds into a process's life, i.e. inside a short window. It is a
    start-up cost a long run pays once. DataLoader workers forked just before it was due inherit
    the collector's counts and run it themselves, and one worker paused that long stalls a
    loader that delivers in order (slow-storage, 8 workers: the window lost 3-4%). Run between
    the warm-up and the window instead, it let the workers fill their queues during its pause,
    and the window's first steps took that backlog for free (slow-storage: the runner read 1.04x
    the plain loop). Collections that steady-state training causes still fall in the window.
    """
    gc.collect()


def _times_whole_epochs(loop: TrainingLoop, plan: MeasurePlan, round_steps: int) -> bool:
    """Short epochs are timed whole, from one epoch's start to another's end, as a run sees
    them; long ones over a window, with an epoch's start measured apart and amortised."""
    epoch = loop.steps_per_epoch
    return epoch is not None and epoch <= max(plan.min_steps, WHOLE_EPOCH_ROUNDS * round_steps)


def _startup_backlog(config: Config) -> int:
    """Batches the workers queue before the first step: each holds ``prefetch_factor``."""
    normalized = config.normalized()
    return normalized.num_workers * (normalized.prefetch_factor or 0)


def _settled(waits: list[float], steps: list[float], span: int) -> bool:
    """The wait for data over the last ``span`` steps matches the ``span`` before them, within
    a tenth of a step (or a millisecond)."""
    if len(waits) < 2 * span:
        return False
    recent = statistics.fmean(waits[-span:])
    before = statistics.fmean(waits[-2 * span : -span])
    tolerance = max(1e-3, 0.1 * statistics.fmean(steps[-2 * span :]))
    return abs(recent - before) <= tolerance


def warm_up(loop: TrainingLoop, plan: MeasurePlan, progress: ProgressSink | None = None) -> int:
    """Step until the start-up backlog is used up and the data wait has settled.

    While the workers' first prefetched batches last, a step waits less than it will in steady
    state; a fixed count of warm-up steps would time that backlog as if it were throughput.

    Every ``progress_interval_s`` it reports a ``warmup`` progress event: the median rate of
    the steps past an epoch's start so far (the median, so that a first step's one-off costs,
    cuDNN's search or a compilation, do not make it look slow), their count and their seconds.
    """
    config = loop.config
    # The workers never hold more than the rest of an epoch, and a new epoch's refill is the
    # epoch start's cost (timed apart), so the backlog to use up is at most an epoch.
    backlog = _startup_backlog(config)
    if loop.steps_per_epoch is not None:
        backlog = min(backlog, loop.steps_per_epoch)
    minimum = max(plan.warmup_steps, config.num_workers + 1, backlog + 1)
    span = max(plan.warmup_steps, config.num_workers, 2)
    waits: list[float] = []
    steps: list[float] = []
    rates: list[float] = []
    started = last_report = time.perf_counter()
    total = 0
    while True:
        step_started = time.perf_counter()
        samples = loop.step(loop.next_batch())
        total += 1
        if loop.last_in_epoch_start:  # an epoch's start is not its steady state
            continue
        now = time.perf_counter()
        steps.append(now - step_started)
        waits.append(loop.last_wait_s)
        rates.append(samples / max(steps[-1], 1e-9))
        if progress is not None and now - last_report >= plan.progress_interval_s:
            last_report = now
            progress(
                {
                    "event": "progress",
                    "warmup": True,
                    "steps": len(steps),
                    "seconds": sum(steps),
                    "samples_per_s": statistics.median(rates),
                }
            )
        if now - started > plan.max_warmup_s:
            return total
        if len(steps) >= minimum and _settled(waits, steps, span):
            return total


def _epoch_start_excess(
    loop: TrainingLoop, ordinary_wait_s: float, ordinary_work_s: float
) -> tuple[float, float]:
    """What starting an epoch costs beyond its batches' ordinary waits and steps: the excess
    wait over an epoch's first steps and, on a CPU, the excess of those steps' own work (see
    :attr:`TrainingLoop.epoch_start_steps`), each the median over the epochs started after the
    very first (which is cold: imports, first touch of the data). When no later epoch has
    started completely, one is started on purpose once the window is over.
    """

    def complete() -> list[tuple[list[float], list[float]]]:
        groups = zip(loop.epoch_start_waits[1:], loop.epoch_start_steps[1:], strict=True)
        return [(waits, works) for waits, works in groups if len(waits) == loop.start_steps]

    if not complete():
        loop.start_new_epoch()
        for _ in range(loop.start_steps):
            loop.step(loop.next_batch())
        loop.synchronize()
    epochs = complete()
    wait = statistics.median(sum(waits) - len(waits) * ordinary_wait_s for waits, _ in epochs)
    work = statistics.median(sum(works) - len(works) * ordinary_work_s for _, works in epochs)
    return max(0.0, wait), max(0.0, work)


def _beyond_ordinary(values: list[float], in_epoch_start: list[bool]) -> tuple[float, float]:
    """The mean of ``values`` over the steps past an epoch's start (over all of them where
    none is), and how far the epoch-start steps' values exceed it, summed."""
    pairs = list(zip(values, in_epoch_start, strict=True))
    ordinary = statistics.fmean([v for v, starting in pairs if not starting] or values)
    return ordinary, sum(v - ordinary for v, starting in pairs if starting)


class _DeviceTimer:
    """CUDA events around each step; elapsed times are read once, after the window."""

    def __init__(self, device: torch.device) -> None:
        self.enabled = device.type == "cuda"
        self._pairs: list[tuple[Any, Any]] = []

    def start(self) -> Any:
        if not self.enabled:
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def stop(self, started: Any) -> None:
        if started is None:
            return
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self._pairs.append((started, event))

    def busy(self) -> bool:
        """The device is still working on the last step timed (a query, no synchronisation)."""
        return bool(self._pairs) and not self._pairs[-1][1].query()

    def step_times_s(self) -> list[float]:
        """Device time of each step; call after synchronising."""
        return [start.elapsed_time(end) / 1000 for start, end in self._pairs]


def measure(
    workload: Workload,
    config: Config,
    device: torch.device,
    plan: MeasurePlan,
    progress: ProgressSink | None = None,
) -> WindowMetrics:
    """Train ``workload`` with ``config`` and time a steady-state window.

    A configuration that compiles first steps until compilation is done (timed apart, as
    ``compile_s``), with inductor's caches empty, as on a user's first run.
    Raises :class:`NonFiniteLoss` when a loss was NaN/inf; errors from the workload propagate.
    """
    compiles = config.compile != "off"
    with fresh_compile_caches() if compiles else contextlib.nullcontext():
        return _measure(workload, config, device, plan, progress)


def _measure(
    workload: Workload,
    config: Config,
    device: torch.device,
    plan: MeasurePlan,
    progress: ProgressSink | None = None,
) -> WindowMetrics:
    torch.manual_seed(plan.seed)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    loop = TrainingLoop(workload, config, device)
    collect_setup_garbage()
    compiling = None
    if config.compile != "off":
        # The parent may stop a trial whose compiling alone outlasts what the run can repay.
        if progress is not None:
            progress({"event": "compiling"})
        compiling = compile_phase(loop)
        if progress is not None:
            progress({"event": "compiled"})
        collect_setup_garbage()  # compiling leaves as many survivors again
    warmup = warm_up(loop, plan, progress)
    loop.synchronize()
    loop.check_finite()
    if progress is not None:
        progress({"event": "warmed_up", "warmup_steps": warmup})

    device_timer = _DeviceTimer(device)
    if device_timer.enabled:
        loop.clock.device_busy = device_timer.busy
    host_steps: list[float] = []
    waits: list[float] = []
    works: list[float] = []
    in_epoch_start: list[bool] = []
    copy_before = loop.clock.copy_s
    # Workers started together deliver in bursts, one batch each per round: the steps past an
    # epoch's start cover whole rounds, two at least, so their mean wait is the steady state's
    # whatever the window's phase (three steps right after a burst would wait for nothing).
    round_steps = max(1, config.num_workers)
    whole_epochs = _times_whole_epochs(loop, plan, round_steps)
    # A whole epoch is a whole cycle of what a run sees: one that outlasts ``min_seconds``
    # needs no second to reach ``min_steps`` (text-transformer at batch 512 on a 2-core CPU:
    # 8 steps an epoch of 1.7 s each, and a second epoch added 14 s to every such window).
    min_steps = (
        min(plan.min_steps, loop.steps_per_epoch or plan.min_steps)
        if whole_epochs
        else plan.min_steps
    )
    # Whole epochs are timed from wherever the warm-up left off: any run of an epoch's count of
    # steps holds one epoch's start and one of each of its other steps, as a run from an
    # epoch's start to its end does. Waiting for the next epoch to begin cost up to an epoch
    # of steps that nothing timed (text-transformer at batch 192 with 12 workers on a 2-core
    # CPU: 15 steps of 1 s each, beside a window of 21).
    epoch_steps = loop.steps_per_epoch or 1
    loop.synchronize()
    ordinary_steps = 0
    samples = 0
    start = time.perf_counter()
    last_report = previous = start
    while True:
        batch = loop.next_batch()
        waits.append(loop.last_wait_s)
        in_epoch_start.append(loop.last_in_epoch_start)
        ordinary_steps += not loop.last_in_epoch_start
        started = device_timer.start()
        samples += loop.step(batch)
        device_timer.stop(started)
        works.append(loop.last_step_s)
        now = time.perf_counter()
        host_steps.append(now - previous)
        previous = now
        elapsed = now - start
        long_enough = len(host_steps) >= min_steps and elapsed >= plan.min_seconds
        whole_so_far = len(host_steps) % epoch_steps == 0
        if long_enough and (
            whole_so_far
            if whole_epochs
            else ordinary_steps >= 2 * round_steps and ordinary_steps % round_steps == 0
        ):
            break
        # A window of whole epochs reports after whole epochs' worth of steps: within one, the
        # rate so far may hold the epoch's start (its first round of workers) without the
        # rounds that repay it.
        if (
            progress is not None
            and now - last_report >= plan.progress_interval_s
            and (whole_so_far or not whole_epochs)
        ):
            last_report = now
            progress(
                {"event": "progress", "steps": len(host_steps), "samples_per_s": samples / elapsed}
            )
    loop.synchronize()
    window = time.perf_counter() - start
    loop.clock.device_busy = None
    loop.check_finite()
    steps = len(host_steps)
    copy_wait = loop.clock.copy_s - copy_before

    # Over a window of part of an epoch, the steps of an epoch's start that fell in it are
    # counted at an ordinary step's wait, and the start's extra cost is amortised over a whole
    # epoch instead: a window that happens to hold an epoch start (or none) reports what a run
    # of whole epochs sees. Whole epochs are that already.
    # On a CPU an epoch's first steps may also work longer than the others (see
    # ``TrainingLoop.epoch_start_steps``): that excess is the epoch start's too. On CUDA a
    # step's host time is its launches, and the wait already holds what the device did not hide.
    ordinary_wait, start_wait_excess = _beyond_ordinary(waits, in_epoch_start)
    ordinary_work, start_work_excess = (
        _beyond_ordinary(works, in_epoch_start) if device.type == "cpu" else (0.0, 0.0)
    )
    restart_s: float | None = None
    effective, waited = window, sum(waits)
    if loop.steps_per_epoch is not None:
        restart_wait, restart_work = _epoch_start_excess(loop, ordinary_wait, ordinary_work)
        restart_s = restart_wait + restart_work
        if not whole_epochs:
            # Epochs' starts amortised over the window's share of an epoch; only the waiting
            # part of them is data wait.
            per_step = steps / loop.steps_per_epoch
            effective += restart_s * per_step - start_wait_excess - start_work_excess
            waited += restart_wait * per_step - start_wait_excess
    step_times = device_timer.step_times_s() or host_steps
    compile_s: float | None = None
    if compiling is not None:
        # An ordinary step's work: the device's time on CUDA, else the host's less the wait.
        ordinary = device_timer.step_times_s() or [
            h - w for h, w in zip(host_steps, waits, strict=True)
        ]
        compile_steps, compile_wall = compiling
        compile_s = max(0.0, compile_wall - compile_steps * statistics.median(ordinary))
    cuda = device.type == "cuda"
    return WindowMetrics(
        samples_per_s=samples / effective,
        step_time_median_ms=statistics.median(step_times) * 1000,
        step_time_p90_ms=_percentile(step_times, 0.9) * 1000,
        data_wait_fraction=min(1.0, waited / effective),
        copy_wait_fraction=min(1.0, copy_wait / window),
        steps=steps,
        warmup_steps=warmup,
        window_s=window,
        epoch_restart_s=restart_s,
        steps_per_epoch=loop.steps_per_epoch,
        losses_finite=True,
        peak_memory_allocated_bytes=int(torch.cuda.max_memory_allocated(device)) if cuda else None,
        peak_memory_reserved_bytes=int(torch.cuda.max_memory_reserved(device)) if cuda else None,
        compile_s=compile_s,
    )
