"""Stopping a hopeless trial during its warm-up, before its timed window starts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autotune.search._pruner import MIN_COMPLETED

#: A trial is stopped during warm-up when its warm-up rate is below this share of the best
#: finished one: half of :data:`~autotune.search._pruner.PRUNE_RATIO`, since a warm-up rate
#: still carries one-off costs (the allocator growing, first touch of the data, page faults).
WARMUP_PRUNE_RATIO = 0.25
#: ... and only once it has timed this many steps past an epoch's start, over this many seconds.
WARMUP_MIN_STEPS = 5
WARMUP_MIN_SECONDS = 1.0


def hopeless_in_warmup(
    event: Mapping[str, Any],
    finished: Sequence[float],
    ratio: float = WARMUP_PRUNE_RATIO,
    min_completed: int = MIN_COMPLETED,
    min_steps: int = WARMUP_MIN_STEPS,
    min_seconds: float = WARMUP_MIN_SECONDS,
) -> bool:
    """Whether a ``warmup`` progress event shows a trial that cannot come near the best.

    The event's rate is the median of the warm-up steps' own rates, so a few slow first steps
    (a compilation, cuDNN's search) do not count against it; on a GPU, the host's early steps
    run ahead of the device, which only makes a trial look faster. Both err on the side of
    letting a trial reach its window, where :func:`clearly_slow` judges it again.

    Example:
        >>> event = {"warmup": True, "steps": 8, "seconds": 1.5, "samples_per_s": 20.0}
        >>> hopeless_in_warmup(event, [100.0, 120.0, 90.0])
        True
        >>> hopeless_in_warmup(event | {"samples_per_s": 40.0}, [100.0, 120.0, 90.0])
        False
    """
    if len(finished) < min_completed or not event.get("warmup"):
        return False
    if event.get("steps", 0) < min_steps or event.get("seconds", 0.0) < min_seconds:
        return False
    return float(event["samples_per_s"]) < ratio * max(finished)
