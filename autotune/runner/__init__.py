"""One isolated process per trial: start, supervise (timeout, memory, prune, cancel), classify."""

from autotune.runner._devices import TrialDevice, trial_device
from autotune.runner._process import (
    DEFAULT_HOST_MEMORY_SHARE,
    ProbeResult,
    ProgressCallback,
    TrialCancelled,
    default_host_memory_cap,
    kill_group,
    probe_workload,
    run_trial,
)

__all__ = [
    "DEFAULT_HOST_MEMORY_SHARE",
    "ProbeResult",
    "ProgressCallback",
    "TrialCancelled",
    "TrialDevice",
    "default_host_memory_cap",
    "kill_group",
    "probe_workload",
    "run_trial",
    "trial_device",
]
