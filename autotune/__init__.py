"""autotune: measure and search the settings that decide PyTorch training speed.

The public surface: the workload contract users implement, the configuration, the options of a
tuning job, applying a recommendation, and the errors autotune raises.
"""

from autotune.errors import (
    AutotuneError,
    ConfigError,
    NoFeasibleConfigError,
    StoreError,
    WorkloadError,
)
from autotune.recommend import Recommendation, load_recommendation
from autotune.space import Config
from autotune.tuner import TuneOptions
from autotune.workload import Workload

__all__ = [
    "AutotuneError",
    "Config",
    "ConfigError",
    "NoFeasibleConfigError",
    "Recommendation",
    "StoreError",
    "TuneOptions",
    "Workload",
    "WorkloadError",
    "load_recommendation",
]
__version__ = "0.1.0"
