"""How far each prediction may be off: from how its parts were read, and what the profile left out.

A prediction starts at :data:`BASE_UNCERTAINTY` (the profile times each part alone; a trial's
loop adds epoch starts and contention), gains :data:`INTERPOLATED`, :data:`EXTRAPOLATED` or
:data:`NOT_COVERED` where a part was read between, beyond or without measured points
(:func:`interpolate` says which), and :data:`UNCOVERED_KNOB` per knob the configuration sets
otherwise than the profile ran it. The search explores the most uncertain of the fast ones.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

import numpy as np

from autotune.predict._columns import BoolArray, Columns, FloatArray
from autotune.predict._compile import compile_columns
from autotune.predict._optimizer import optimizer_columns
from autotune.predict._profile import Profile

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
    # The step sweep runs eagerly: a compiled step's speed (and its compile time) is unknown
    # where the profile did not time its mode (see autotune.predict._compile).
    "compile": 0.5,
    # The step sweep runs the optimizer as the workload builds it: another implementation's
    # update is unknown where the profile did not time it (see autotune.predict._optimizer).
    "optimizer_impl": 0.1,
    # The profile ran with or without glibc retaining freed memory; the other setting changes
    # how many pages each step faults in afresh, by an amount only a trial shows (the step's,
    # where the profile timed its fresh-heap ratio: then only the workers').
    "retain_freed_memory": 0.1,
}
#: The prefetch factor of the loader sweep (the profile times its fastest count again with
#: PyTorch's default, :attr:`Profile.loader_prefetch`).
PROFILED_PREFETCH = 1


def interpolate(
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


def uncovered_knobs(profile: Profile, columns: Columns) -> dict[str, BoolArray]:
    """For each knob of :data:`UNCOVERED_KNOB`, the configurations that set it otherwise than
    the profile ran it."""
    has_workers = columns.num_workers > 0
    return {
        "pin_memory": columns.pin_memory,
        "device_prefetch": columns.device_prefetch,
        "cudnn_benchmark": columns.cudnn_benchmark,
        "tf32": columns.tf32,
        "compile": ~compile_columns(profile, columns).timed,
        "optimizer_impl": ~optimizer_columns(profile, columns).timed,
        "persistent_workers": columns.persistent_workers & has_workers,
        "prefetch_factor": has_workers
        & (columns.prefetch_factor != PROFILED_PREFETCH)
        & (columns.prefetch_factor != _timed_ahead(profile)),
        "retain_freed_memory": _heap_uncovered(profile, columns),
    }


def combined(step: FloatArray, loader: FloatArray, uncovered: dict[str, BoolArray]) -> FloatArray:
    """Each configuration's uncertainty: its less certain part's, plus each uncovered knob's
    share; at most 1."""
    total = np.maximum(step, loader) + sum(
        (UNCOVERED_KNOB[name] * mask for name, mask in uncovered.items()), np.zeros(len(step))
    )
    return np.asarray(np.minimum(1.0, total), dtype=np.float64)


def _heap_uncovered(profile: Profile, columns: Columns) -> BoolArray:
    """Configurations whose handling of freed memory the profile did not time: with a
    fresh-heap ratio, the step is timed both ways but the workers only as the profile ran."""
    differs = columns.retain_freed_memory != profile.retained_freed_memory
    if profile.fresh_heap:
        differs &= columns.num_workers > 0
    return differs


def _timed_ahead(profile: Profile) -> int:
    """The prefetch factor the profile timed besides the sweep's (0: none)."""
    ahead = profile.loader_prefetch
    return (ahead.prefetch_factor or 0) if ahead is not None else 0
