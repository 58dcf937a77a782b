"""The epoch start's amortisation: what starting an epoch costs, spread over an epoch's steps.

An epoch's first steps cost more than its steady state: without ``persistent_workers`` they wait
for new workers to start, and on a CPU workers forked at the start share the process's pages
copy-on-write, so the first steps also work longer copying what they write. A window of part of
an epoch holds such a start by chance (or none), so its steps that were an epoch's start count
at an ordinary step's cost, and the start's extra cost is amortised over a whole epoch instead:
the rate is what a run of whole epochs sees. A window of whole epochs is that already.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from autotune.measure._loop import TrainingLoop
from autotune.measure._window import WindowRecord


@dataclass(frozen=True)
class Amortised:
    """The window's seconds and data wait with the epoch start at its share of an epoch."""

    #: The window's seconds as a run of whole epochs would spend them on its steps.
    seconds: float
    #: The part of :attr:`seconds` spent waiting for data.
    waited_s: float
    #: Seconds an epoch's start costs beyond ordinary steps; None when the loader has no length.
    epoch_restart_s: float | None


def amortise_epoch_start(loop: TrainingLoop, window: WindowRecord) -> Amortised:
    """Replace the epoch starts the window held by the median epoch start, at an epoch's share.

    On a CPU an epoch's first steps may also work longer than the others (see
    :attr:`TrainingLoop.epoch_start_steps`): that excess is the epoch start's too. On CUDA a
    step's host time is its launches, and the wait already holds what the device did not hide.
    Only the waiting part of an epoch's start is data wait. When no epoch after the first has
    started in full, one is started on purpose (its steps are not part of the window).
    """
    ordinary_wait, start_wait_excess = _beyond_ordinary(window.waits_s, window.in_epoch_start)
    ordinary_work, start_work_excess = (
        _beyond_ordinary(window.works_s, window.in_epoch_start)
        if loop.device.type == "cpu"
        else (0.0, 0.0)
    )
    seconds, waited = window.seconds, sum(window.waits_s)
    if loop.steps_per_epoch is None:
        return Amortised(seconds, waited, None)
    restart_wait, restart_work = _epoch_start_excess(loop, ordinary_wait, ordinary_work)
    restart_s = restart_wait + restart_work
    if not window.whole_epochs:
        per_step = window.steps / loop.steps_per_epoch
        seconds += restart_s * per_step - start_wait_excess - start_work_excess
        waited += restart_wait * per_step - start_wait_excess
    return Amortised(seconds, waited, restart_s)


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
