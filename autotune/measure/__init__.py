"""Inside a trial: the training step, the timed loop, host memory, NVML, the fingerprint."""

from autotune.measure._batches import DevicePrefetcher, to_device
from autotune.measure._compile import compile_unavailable
from autotune.measure._cuda_allocator import (
    expandable_segments_environment,
    use_expandable_segments,
)
from autotune.measure._cuda_graphs import UnsuitedValue
from autotune.measure._fingerprint import (
    DeviceIdentity,
    comparable_identity,
    dataloader_takes_in_order,
    device_identity,
    device_info,
    device_uuid,
    fingerprint,
    fingerprint_differences,
    resolve_device,
)
from autotune.measure._host_allocator import (
    RETAIN_ENVIRONMENT,
    glibc_malloc,
    retain_freed_memory,
)
from autotune.measure._host_memory import (
    TreeMemorySampler,
    peak_proportional_bytes,
    tree_memory_bytes,
)
from autotune.measure._loop import (
    MeasurePlan,
    NonFiniteLoss,
    TrainingLoop,
    build_loader,
    input_batch_ndim,
)
from autotune.measure._measure import WindowMetrics, measure
from autotune.measure._nvml import UtilizationSampler, nvml_devices
from autotune.measure._optimizer import supported_implementations, with_implementation
from autotune.measure._step import (
    TrainingStep,
    WaitClock,
    apply_backend_flags,
    autocast_dtype,
    call_model,
    returned_loss,
    set_tf32,
)
from autotune.measure._visible import VISIBLE_ENV, visible_devices
from autotune.measure.profiling import ProfilePlan, profile

__all__ = [
    "DeviceIdentity",
    "DevicePrefetcher",
    "MeasurePlan",
    "NonFiniteLoss",
    "ProfilePlan",
    "RETAIN_ENVIRONMENT",
    "TrainingLoop",
    "TrainingStep",
    "TreeMemorySampler",
    "UnsuitedValue",
    "UtilizationSampler",
    "VISIBLE_ENV",
    "WaitClock",
    "WindowMetrics",
    "apply_backend_flags",
    "autocast_dtype",
    "build_loader",
    "call_model",
    "compile_unavailable",
    "comparable_identity",
    "dataloader_takes_in_order",
    "device_identity",
    "device_info",
    "device_uuid",
    "expandable_segments_environment",
    "fingerprint",
    "fingerprint_differences",
    "glibc_malloc",
    "input_batch_ndim",
    "measure",
    "nvml_devices",
    "peak_proportional_bytes",
    "profile",
    "resolve_device",
    "retain_freed_memory",
    "returned_loss",
    "set_tf32",
    "supported_implementations",
    "to_device",
    "tree_memory_bytes",
    "use_expandable_segments",
    "visible_devices",
    "with_implementation",
]
