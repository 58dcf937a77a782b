"""One isolated process per trial: start, supervise (timeout, memory, prune, cancel), classify."""

from autotune.runner._process import (
    ProbeResult,
    ProgressCallback,
    TrialResult,
    kill_group,
    probe_workload,
    run_trial,
)

__all__ = [
    "ProbeResult",
    "ProgressCallback",
    "TrialResult",
    "kill_group",
    "probe_workload",
    "run_trial",
]
