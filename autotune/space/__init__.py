"""The knobs, one configuration, and the search space of a job on a device."""

from autotune.space._config import (
    TORCH_DEFAULT_PREFETCH_FACTOR,
    AmpMode,
    CompileMode,
    Config,
    OptimizerImpl,
)
from autotune.space._facts import DeviceInfo, WorkloadInfo
from autotune.space._knobs import (
    CUDA_GRAPH_MODES,
    KNOBS,
    Knob,
    amp_modes,
    compile_modes,
    default_max_workers,
    value_unavailable,
)
from autotune.space._space import (
    SearchSpace,
    check_knob_settings,
    coerce_knob_value,
    has_control_character,
    parse_assignments,
)

__all__ = [
    "CUDA_GRAPH_MODES",
    "KNOBS",
    "TORCH_DEFAULT_PREFETCH_FACTOR",
    "AmpMode",
    "CompileMode",
    "Config",
    "DeviceInfo",
    "Knob",
    "OptimizerImpl",
    "SearchSpace",
    "WorkloadInfo",
    "amp_modes",
    "check_knob_settings",
    "compile_modes",
    "coerce_knob_value",
    "default_max_workers",
    "has_control_character",
    "parse_assignments",
    "value_unavailable",
]
