"""The soft minimum that joins two bounds: never above the smaller, and lower the closer they are.

Two sides that each could go at their own rate rarely overlap perfectly: a step waits now and
then for a late batch, and a loader near the step's rate leaves it waiting more often. The
predictor joins such bounds with ``(sum b^-p)^(-1/p)``, whose power says how sharp the corner is.
"""

from __future__ import annotations

import numpy as np

from autotune.predict._columns import FloatArray

#: Sharpness of the soft minimum of the bounds: two equal bounds give 92% of either (the
#: workers and the step never overlap perfectly); a bound twice the other costs 0.05%.
SOFT_MIN_POWER = 8.0


def soft_min(bounds: FloatArray, power: float = SOFT_MIN_POWER) -> FloatArray:
    """``(sum b^-p)^(-1/p)`` over the bounds (axis 0): never above the smallest, and the closer
    the others come to it the further below."""
    smallest = np.min(bounds, axis=0)
    scaled = np.where(np.isfinite(bounds), smallest / bounds, 0.0)
    total = np.sum(scaled**power, axis=0)
    return np.asarray(smallest / total ** (1.0 / power), dtype=np.float64)
