"""The timed window: steps from wherever the warm-up ended until the window is long and whole.

Each step is timed by two clock reads, beside its wait for the loader and its own host work
(kept by :class:`~autotune.measure._loop.TrainingLoop`), and on CUDA by two events for the
device's own step time, read once the window is over.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from autotune.measure._loop import MeasurePlan, ProgressSink, TrainingLoop

#: An epoch of at most this many rounds of the workers (a batch from each) is timed whole:
#: its start is too large a share of it, and too close to its bursts, to be told apart.
WHOLE_EPOCH_ROUNDS = 4


@dataclass
class WindowRecord:
    """What the timed window saw: one entry per step in each list, and the window's totals."""

    #: Whether the window is a whole number of epochs (see :class:`WindowLength`).
    whole_epochs: bool
    #: Host seconds of each step, from the previous step's end (the window's start for the
    #: first): its wait for data, its copy to the device and its own work.
    host_steps_s: list[float] = field(default_factory=list)
    #: Each step's wait for the loader (:attr:`TrainingLoop.last_wait_s`).
    waits_s: list[float] = field(default_factory=list)
    #: Each step's own host work (:attr:`TrainingLoop.last_step_s`).
    works_s: list[float] = field(default_factory=list)
    #: Whether each step was one of its epoch's first (:attr:`TrainingLoop.start_steps`).
    in_epoch_start: list[bool] = field(default_factory=list)
    #: On CUDA, each step's time on the device (CUDA events); empty elsewhere.
    device_steps_s: list[float] = field(default_factory=list)
    samples: int = 0
    #: The window's wall time, up to the device finishing its last step.
    seconds: float = 0.0
    #: Host seconds spent copying batches to the device over the window.
    copy_wait_s: float = 0.0

    @property
    def steps(self) -> int:
        return len(self.host_steps_s)


@dataclass(frozen=True)
class WindowLength:
    """When the timed window may end, and when it may report its rate so far.

    Short epochs are timed whole, from wherever the warm-up left off: any run of an epoch's
    count of steps holds one epoch's start and one of each of its other steps, as a run from an
    epoch's start to its end does, and waiting for the next epoch to begin would cost up to an
    epoch of steps that nothing times. Longer epochs are timed over whole rounds of the
    workers, with an epoch's start measured apart and amortised.
    """

    whole_epochs: bool
    min_steps: int
    min_seconds: float
    #: Steps in one round of the workers (a batch from each).
    round_steps: int
    #: Steps in an epoch; 1 when the loader has no length.
    epoch_steps: int

    @classmethod
    def of(cls, loop: TrainingLoop, plan: MeasurePlan) -> WindowLength:
        # Workers started together deliver in bursts, one batch each per round: the steps past
        # an epoch's start cover whole rounds, two at least, so their mean wait is the steady
        # state's whatever the window's phase (three steps right after a burst would wait for
        # nothing).
        round_steps = max(1, loop.config.num_workers)
        epoch = loop.steps_per_epoch
        whole_epochs = epoch is not None and epoch <= max(
            plan.min_steps, WHOLE_EPOCH_ROUNDS * round_steps
        )
        # A whole epoch is a whole cycle of what a run sees: one that outlasts ``min_seconds``
        # needs no second to reach ``min_steps``, which would only lengthen the window.
        min_steps = min(plan.min_steps, epoch or plan.min_steps) if whole_epochs else plan.min_steps
        return cls(whole_epochs, min_steps, plan.min_seconds, round_steps, epoch or 1)

    def ends_at(self, steps: int, ordinary_steps: int, elapsed: float) -> bool:
        """The window may end after ``steps`` steps (``ordinary_steps`` of them past an
        epoch's start) and ``elapsed`` seconds."""
        if steps < self.min_steps or elapsed < self.min_seconds:
            return False
        if self.whole_epochs:
            return steps % self.epoch_steps == 0
        return ordinary_steps >= 2 * self.round_steps and ordinary_steps % self.round_steps == 0

    def may_report_at(self, steps: int) -> bool:
        """A window of whole epochs reports only after whole epochs' worth of steps: within one,
        the rate so far may hold the epoch's start (its first round of workers) without the
        rounds that repay it."""
        return not self.whole_epochs or steps % self.epoch_steps == 0


def time_window(
    loop: TrainingLoop, plan: MeasurePlan, progress: ProgressSink | None = None
) -> WindowRecord:
    """Step and time each step until :meth:`WindowLength.ends_at` says the window is done.

    Every ``progress_interval_s`` (where :meth:`WindowLength.may_report_at` allows) it reports
    a ``progress`` event: the steps so far and their rate. Raises
    :class:`~autotune.measure.NonFiniteLoss` when a loss in the window was NaN or infinite.
    """
    length = WindowLength.of(loop, plan)
    device_timer = _DeviceTimer(loop.device)
    if device_timer.enabled:
        loop.clock.device_busy = device_timer.busy
    record = WindowRecord(whole_epochs=length.whole_epochs)
    copy_before = loop.clock.copy_s
    loop.synchronize()
    ordinary_steps = 0
    start = time.perf_counter()
    last_report = previous = start
    while True:
        batch = loop.next_batch()
        record.waits_s.append(loop.last_wait_s)
        record.in_epoch_start.append(loop.last_in_epoch_start)
        ordinary_steps += not loop.last_in_epoch_start
        started = device_timer.start()
        record.samples += loop.step(batch)
        device_timer.stop(started)
        record.works_s.append(loop.last_step_s)
        now = time.perf_counter()
        record.host_steps_s.append(now - previous)
        previous = now
        elapsed = now - start
        if loop.decide(length.ends_at(record.steps, ordinary_steps, elapsed)):
            break
        if (
            progress is not None
            and now - last_report >= plan.progress_interval_s
            and length.may_report_at(record.steps)
        ):
            last_report = now
            progress(
                {
                    "event": "progress",
                    "steps": record.steps,
                    "samples_per_s": record.samples / elapsed,
                }
            )
    loop.synchronize()
    record.seconds = time.perf_counter() - start
    loop.clock.device_busy = None
    loop.check_finite()
    record.copy_wait_s = loop.clock.copy_s - copy_before
    record.device_steps_s = device_timer.step_times_s()
    return record


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
