"""Loading the user's workload: the contract, references on the command line, built-ins."""

from autotune.workload._contract import ModelInputs, StepHooks, Workload
from autotune.workload._loader import (
    WorkloadRef,
    builtin_names,
    load_workload,
    parse_ref,
    preload_workload,
)

__all__ = [
    "ModelInputs",
    "StepHooks",
    "Workload",
    "WorkloadRef",
    "builtin_names",
    "load_workload",
    "parse_ref",
    "preload_workload",
]
