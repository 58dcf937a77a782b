"""Profile-guided prediction: the step's and the loader's capacities bound every configuration.

The stage between ``space`` and ``search``: a :class:`Profile` (measured once per job by the
runner) predicts the samples/s, memory and bounding side of every configuration of a space.
"""

from autotune.predict._predict import (
    BOUNDS,
    Columns,
    Predictions,
    predict_columns,
    predict_configs,
    predict_space,
    ranking,
)
from autotune.predict._profile import (
    AccumulationPoint,
    ForkCopyPoint,
    HeapPoint,
    LoaderPoint,
    MemoryModel,
    Profile,
    StepPoint,
    public_profile,
)

__all__ = [
    "AccumulationPoint",
    "BOUNDS",
    "Columns",
    "ForkCopyPoint",
    "HeapPoint",
    "LoaderPoint",
    "MemoryModel",
    "Predictions",
    "Profile",
    "public_profile",
    "StepPoint",
    "predict_columns",
    "predict_configs",
    "predict_space",
    "ranking",
]
