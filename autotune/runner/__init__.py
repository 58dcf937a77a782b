"""One isolated process per trial, forked from a warm server: start, supervise (timeout,
memory, prune, cancel), classify."""

from autotune.runner._devices import TrialDevice, rank_devices, trial_device
from autotune.runner._environment import trial_environment, withhold_from_trials
from autotune.runner._launcher import START_ENV, TrialLauncher
from autotune.runner._process import (
    DEFAULT_HOST_MEMORY_SHARE,
    ProbeResult,
    ProfileFailed,
    ProgressCallback,
    TrialCancelled,
    default_host_memory_cap,
    kill_group,
    probe_workload,
    profile_workload,
    run_trial,
)
from autotune.runner._ranks import RankPlan, check_gpu_count

__all__ = [
    "DEFAULT_HOST_MEMORY_SHARE",
    "ProbeResult",
    "ProfileFailed",
    "ProgressCallback",
    "RankPlan",
    "START_ENV",
    "TrialCancelled",
    "TrialDevice",
    "TrialLauncher",
    "check_gpu_count",
    "default_host_memory_cap",
    "kill_group",
    "probe_workload",
    "profile_workload",
    "rank_devices",
    "run_trial",
    "trial_device",
    "trial_environment",
    "withhold_from_trials",
]
