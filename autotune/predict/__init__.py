"""Profile-guided prediction: the step's and the loader's capacities bound every configuration.

The stage between ``space`` and ``search``: a :class:`Profile` (measured once per job by the
runner) predicts the samples/s, memory and bounding side of every configuration of a space.
"""

from autotune.predict._columns import Columns
from autotune.predict._compile import compile_known_s
from autotune.predict._host_effects import models_host_effects
from autotune.predict._predict import predict_columns, predict_configs, predict_space
from autotune.predict._predictions import BOUNDS, Predictions, ranking
from autotune.predict._profile import (
    AccumulationPoint,
    CompilePoint,
    ForkCopyPoint,
    HeapPoint,
    LoaderPoint,
    MemoryModel,
    OptimizerPoint,
    Profile,
    StepPoint,
    public_profile,
)

__all__ = [
    "AccumulationPoint",
    "CompilePoint",
    "BOUNDS",
    "Columns",
    "ForkCopyPoint",
    "HeapPoint",
    "LoaderPoint",
    "MemoryModel",
    "OptimizerPoint",
    "Predictions",
    "Profile",
    "public_profile",
    "StepPoint",
    "compile_known_s",
    "models_host_effects",
    "predict_columns",
    "predict_configs",
    "predict_space",
    "ranking",
]
