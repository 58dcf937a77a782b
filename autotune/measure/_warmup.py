"""The steps before the timed window: compilation first, then warm-up until the loop is steady.

Neither is timed as throughput: compilation is a one-off cost (reported apart as ``compile_s``),
and the first steps after the workers start read the batches they prefetched, waiting less than
they will in steady state.
"""

from __future__ import annotations

import statistics
import time

from autotune.measure._compile import MAX_COMPILING_STEPS, compilations
from autotune.measure._loop import (
    MeasurePlan,
    ProgressSink,
    TrainingLoop,
    collect_setup_garbage,
)
from autotune.space import Config


def compile_phase(loop: TrainingLoop, progress: ProgressSink | None = None) -> tuple[int, float]:
    """Step until a step compiles nothing; the steps taken and their wall time.

    Each step is synchronised, so a step's time includes its device work; the wait for the
    loader is not included. Warm-up starts after this, so compilation never counts towards
    its time bound. ``compiling`` and ``compiled`` progress events bracket it: the parent may
    stop a trial whose compiling alone outlasts what the run can repay.
    """
    if progress is not None:
        progress({"event": "compiling"})
    steps, seconds = 0, 0.0
    while steps < MAX_COMPILING_STEPS:
        batch = loop.next_batch()
        before = compilations()
        started = time.perf_counter()
        loop.step(batch)
        loop.synchronize()
        seconds += time.perf_counter() - started
        steps += 1
        if loop.decide(compilations() == before):
            break
    if progress is not None:
        progress({"event": "compiled"})
    collect_setup_garbage()  # compiling leaves as many survivors again as setting up did
    return steps, seconds


def warm_up(loop: TrainingLoop, plan: MeasurePlan, progress: ProgressSink | None = None) -> int:
    """Step until the start-up backlog is used up and the data wait has settled; the steps.

    While the workers' first prefetched batches last, a step waits less than it will in steady
    state; a fixed count of warm-up steps would time that backlog as if it were throughput.
    At the end the device has finished every step and the losses so far are checked (raising
    :class:`~autotune.measure.NonFiniteLoss`), and a ``warmed_up`` progress event is sent.

    Every ``progress_interval_s`` it reports a ``warmup`` progress event: the median rate of
    the steps past an epoch's start so far (the median, so that a first step's one-off costs,
    cuDNN's search or a compilation, do not make it look slow), their count and their seconds.
    """
    steps = _steps_until_settled(loop, plan, progress)
    loop.synchronize()
    loop.check_finite()
    if progress is not None:
        progress({"event": "warmed_up", "warmup_steps": steps})
    return steps


def _steps_until_settled(
    loop: TrainingLoop, plan: MeasurePlan, progress: ProgressSink | None
) -> int:
    """The warm-up's steps (see :func:`warm_up`), until settled or ``max_warmup_s`` is over."""
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
            if loop.decide(False):  # every rank of a DDP trial takes part in each decision
                return total
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
        timed_out = now - started > plan.max_warmup_s
        if loop.decide(timed_out or (len(steps) >= minimum and _settled(waits, steps, span))):
            return total


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
