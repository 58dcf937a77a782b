"""Which step points to doubt: pure rules over timed points that decide what the sweep redoes.

A shared machine only ever slows a step down, and a slow spell shows either in the cores the
step kept busy or in the shape of the curve over batch sizes. These rules read one sweep's
points and name the ones to time again (:func:`doubtful`), the precisions and layouts that lost
cores for their whole sweep (:func:`short_of_cores`), and those so far behind the others at
their smallest batch that timing them further is wasted (:func:`outpaced`,
:func:`outpaced_on_every_core`). They measure nothing themselves.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from autotune.predict import StepPoint
from autotune.space import AmpMode

#: On a CPU, a point whose step kept fewer than this share of the cores the sweep's busiest
#: point kept busy was held back (another process or the hypervisor took a core); one that
#: ran this much slower than each of its neighbouring batches dipped; one whose step took this
#: much longer than a larger batch's step was slowed (a larger batch does more work): each is
#: timed again.
DOUBT_CORES_SHARE = 0.9
DOUBT_DIP = 0.10
#: A precision/layout whose step at the smallest batch ran under this share of what a
#: combination timed before it ran there is timed at that batch only: no configuration of it can
#: come near the best (the search skips proposals predicted under a third of the best measured:
#: the same share), and sweeping an emulated precision in full can take most of the step budget
#: (evidence: benchmarks/log/).
OUTPACED_SHARE = 1 / 3
#: A precision/layout whose step kept fewer than this share of the cores another kept busy is
#: timed again (see :func:`short_of_cores`); only where that other kept more than
#: ``MULTI_CORE`` cores busy, since on one core there is no core to lose.
SHORT_OF_CORES = 0.75
MULTI_CORE = 1.5


def doubtful(sweep: Sequence[StepPoint]) -> list[StepPoint]:
    """The timed points of one sweep (one precision and layout, by ascending batch) that a
    later sweep times again: on CUDA every one; on a CPU those the step's cores or the curve
    cast doubt on (see :data:`DOUBT_CORES_SHARE`, :data:`DOUBT_DIP`).

    A slow spell that takes cores from the step shows in the cores it kept busy; one that
    does not (a neighbour's memory traffic) shows where the curve dips and recovers, or, where
    it covers the first few batches of the sweep, where a batch's step took longer than a
    larger batch's: the curve only rises, too steeply. Timing again only these points, not
    every one, saves a large share of the step sweep where few are in doubt, at the cost of a
    little more spread on some workloads (evidence: benchmarks/log/).
    """
    timed = [p for p in sweep if p.samples_per_s and not p.out_of_memory]
    if any(p.cpu_cores is None for p in timed):
        return timed
    busiest = max((p.cpu_cores or 0.0 for p in timed), default=0.0)
    picked = []
    for index, point in enumerate(timed):
        neighbours = [
            p.samples_per_s or 0.0 for p in timed[max(0, index - 1) : index + 2] if p is not point
        ]
        held_back = (point.cpu_cores or 0.0) < DOUBT_CORES_SHARE * busiest
        dipped = bool(neighbours) and (point.samples_per_s or 0.0) < (1 - DOUBT_DIP) * min(
            neighbours
        )
        slowed = any(
            (1 - DOUBT_DIP) * _step_s(point) > _step_s(larger) for larger in timed[index + 1 :]
        )
        if held_back or dipped or slowed:
            picked.append(point)
    return picked


def _step_s(point: StepPoint) -> float:
    """Seconds one step of a timed point took."""
    return point.batch_size / (point.samples_per_s or math.inf)


def outpaced(points: Sequence[StepPoint]) -> set[tuple[AmpMode, bool]]:
    """The precision/layout combinations whose only timed point ran under
    :data:`OUTPACED_SHARE` of another combination's at its batch."""
    by_combo: dict[tuple[AmpMode, bool], list[StepPoint]] = {}
    for point in points:
        if point.samples_per_s:
            by_combo.setdefault((point.amp, point.channels_last), []).append(point)
    return {
        combo for combo, ran in by_combo.items() if len(ran) == 1 and outpaced_by(ran[0], points)
    }


def outpaced_by(point: StepPoint, others: Sequence[StepPoint]) -> bool:
    """Whether ``point`` ran under :data:`OUTPACED_SHARE` of the fastest other precision and
    layout among ``others`` at its batch."""
    rates = [
        p.samples_per_s
        for p in others
        if p.batch_size == point.batch_size
        and p.samples_per_s
        and (p.amp, p.channels_last) != (point.amp, point.channels_last)
    ]
    return bool(point.samples_per_s and rates and point.samples_per_s < OUTPACED_SHARE * max(rates))


def short_of_cores(points: Sequence[StepPoint]) -> list[tuple[AmpMode, bool]]:
    """The precision/layout combinations whose step kept well under the cores another kept busy
    (the median of their points' :attr:`StepPoint.cpu_cores`, below :data:`SHORT_OF_CORES` of
    the busiest combination's), on a CPU where a step keeps more than one core busy.

    A combination swept while something else held a core reads a fraction of its speed, and a
    job predicting from it misjudges its baseline by as much (evidence: benchmarks/log/). One
    that keeps fewer cores busy by its nature is timed again for nothing: one more share of the
    step budget.
    """
    medians = _median_cores(points)
    most = max(medians.values(), default=0.0)
    if len(medians) < 2 or most < MULTI_CORE:
        return []
    return [combo for combo, median in medians.items() if median < SHORT_OF_CORES * most]


def outpaced_on_every_core(points: Sequence[StepPoint]) -> set[tuple[AmpMode, bool]]:
    """The outpaced combinations (see :func:`outpaced`) that stay outpaced when their point is
    credited with the cores the busiest combination kept busy: timing them again with the
    cores to the step could not bring them near the others, so :func:`short_of_cores` does
    not (an emulated precision, slower whatever its cores, would spend a share of the step
    budget for nothing).
    """
    most = max(_median_cores(points).values(), default=0.0)
    hopeless = set()
    for combo in outpaced(points):
        point = next(p for p in points if (p.amp, p.channels_last) == combo and p.samples_per_s)
        if point.cpu_cores and most > point.cpu_cores:
            point = point.model_copy(
                update={"samples_per_s": (point.samples_per_s or 0.0) * most / point.cpu_cores}
            )
        if outpaced_by(point, points):
            hopeless.add(combo)
    return hopeless


def _median_cores(points: Sequence[StepPoint]) -> dict[tuple[AmpMode, bool], float]:
    """Per precision/layout, the median of its timed points' :attr:`StepPoint.cpu_cores`."""
    cores: dict[tuple[AmpMode, bool], list[float]] = {}
    for point in points:
        if point.cpu_cores is not None and point.samples_per_s:
            cores.setdefault((point.amp, point.channels_last), []).append(point.cpu_cores)
    return {combo: statistics.median(values) for combo, values in cores.items()}
