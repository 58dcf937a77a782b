"""Inside a trial: the training step, the timed loop, host memory, NVML, the fingerprint."""

from autotune.measure._batches import DevicePrefetcher, to_device
from autotune.measure._fingerprint import (
    DeviceIdentity,
    device_identity,
    device_info,
    device_uuid,
    fingerprint,
    resolve_device,
)
from autotune.measure._host_memory import TreeMemorySampler, tree_memory_bytes
from autotune.measure._loop import (
    MeasurePlan,
    NonFiniteLoss,
    TrainingLoop,
    WindowMetrics,
    build_loader,
    input_batch_ndim,
    measure,
)
from autotune.measure._nvml import UtilizationSampler, nvml_devices
from autotune.measure._step import (
    TrainingStep,
    WaitClock,
    apply_backend_flags,
    autocast_dtype,
    set_tf32,
)

__all__ = [
    "DeviceIdentity",
    "DevicePrefetcher",
    "MeasurePlan",
    "NonFiniteLoss",
    "TrainingLoop",
    "TrainingStep",
    "TreeMemorySampler",
    "UtilizationSampler",
    "WaitClock",
    "WindowMetrics",
    "apply_backend_flags",
    "autocast_dtype",
    "build_loader",
    "device_identity",
    "device_info",
    "device_uuid",
    "fingerprint",
    "input_batch_ndim",
    "measure",
    "nvml_devices",
    "resolve_device",
    "set_tf32",
    "to_device",
    "tree_memory_bytes",
]
