"""autotune: measure and search the settings that decide PyTorch training speed."""

from autotune.errors import AutotuneError, ConfigError, WorkloadError
from autotune.space import Config
from autotune.workload import Workload

__all__ = ["AutotuneError", "Config", "ConfigError", "Workload", "WorkloadError"]
__version__ = "0.1.0"
