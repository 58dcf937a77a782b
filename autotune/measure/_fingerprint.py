"""The device and software a measurement was taken on, stored with every result."""

from __future__ import annotations

import inspect
import os
import platform
from pathlib import Path
from typing import Any, NamedTuple

import psutil
import torch

from autotune.errors import ConfigError
from autotune.measure._host_allocator import glibc_malloc
from autotune.measure._nvml import nvml_devices
from autotune.measure._visible import visible_devices
from autotune.space import DeviceInfo


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


_CPU_BF16_FLAGS = {"avx512_bf16", "amx_bf16"}


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def resolve_device(requested: str) -> torch.device:
    """``auto`` is the first CUDA device when there is one, else the CPU."""
    if requested == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except RuntimeError:
        raise ConfigError(
            f"--device {requested!r} is not a device; use auto, cpu or cuda:N"
        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"--device {requested}: no CUDA device is available here; use --device cpu"
            )
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise ConfigError(
                f"--device {requested}: only {torch.cuda.device_count()} CUDA "
                "device(s) exist; pick an index below that"
            )
        return torch.device("cuda", index)
    if device.type != "cpu":
        raise ConfigError(f"--device {requested}: only cpu and cuda devices are supported")
    return device


def device_info(device: torch.device) -> DeviceInfo:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return DeviceInfo(
            type="cuda",
            index=device.index or 0,
            uuid=device_uuid(device),
            name=props.name,
            memory_bytes=int(props.total_memory),
            bf16_supported=bool(torch.cuda.is_bf16_supported()),
            bf16_native=props.major >= 8,
            compute_capability=(props.major, props.minor),
            cpu_count=cpu_count(),
            glibc_malloc=glibc_malloc(),
            dataloader_in_order=dataloader_takes_in_order(),
        )
    return DeviceInfo(
        type="cpu",
        name=cpu_model(),
        memory_bytes=int(psutil.virtual_memory().total),
        bf16_supported=True,  # CPU autocast runs bf16 everywhere; whether it pays is measured
        bf16_native=bool(_CPU_BF16_FLAGS & cpu_flags()),
        cpu_count=cpu_count(),
        glibc_malloc=glibc_malloc(),
        dataloader_in_order=dataloader_takes_in_order(),
    )


def dataloader_takes_in_order() -> bool:
    """Whether the installed torch's ``DataLoader`` takes ``in_order`` (torch 2.6 and later)."""
    return "in_order" in inspect.signature(torch.utils.data.DataLoader.__init__).parameters


def device_uuid(device: torch.device) -> str | None:
    """The GPU's UUID as NVML and ``CUDA_VISIBLE_DEVICES`` write it (``GPU-...``)."""
    if device.type != "cuda":
        return None
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def _cudnn_version() -> int | None:
    cudnn = torch.backends.cudnn
    return cudnn.version() if cudnn.is_available() else None


def fingerprint(device: torch.device) -> dict[str, Any]:
    """Device, CPU and software versions: what a reader needs to reproduce a number."""
    info = device_info(device)
    return {
        "device_type": info.type,
        "device_name": info.name,
        "device_memory_bytes": info.memory_bytes,
        "device_uuid": device_uuid(device),
        "compute_capability": list(info.compute_capability) if info.compute_capability else None,
        "cpu_model": cpu_model(),
        "cpu_count": info.cpu_count,
        "host_memory_bytes": int(psutil.virtual_memory().total),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": _cudnn_version(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


class DeviceIdentity(NamedTuple):
    """Which physical device a requested one is on this host, and its class across hosts."""

    #: Names the physical device on this host (``cpu``, ``cuda:GPU-...``; ``cuda:2`` without
    #: NVML): one lock per key.
    key: str
    #: The hardware it is (``cpu: <CPU model>, N cores``, ``cuda: <GPU name>``): jobs are
    #: only run, resumed or taken over on a device of the same class.
    device_class: str


def device_identity(requested: str) -> DeviceIdentity:
    """The identity of device ``requested`` (``auto``, ``cpu``, ``cuda[:N]``) on this host.

    The CUDA index is mapped through ``CUDA_VISIBLE_DEVICES``, so that two processes that see
    one GPU under different indices share its key. The name comes from NVML, so no CUDA
    context is created in this process.
    """
    device = resolve_device(requested)
    if device.type == "cpu":
        return DeviceIdentity("cpu", f"cpu: {cpu_model()}, {cpu_count()} cores")
    index = device.index or 0
    visible = visible_devices(os.environ) or []
    physical = visible[index] if index < len(visible) else str(index)
    # CUDA_VISIBLE_DEVICES may name a GPU by ordinal or by UUID: the key is the UUID where NVML
    # knows the GPU, so processes that name one GPU either way share its lock.
    known = next(
        (gpu for gpu in nvml_devices() if physical in (str(gpu["index"]), gpu["uuid"])), None
    )
    if known is not None:
        return DeviceIdentity(f"cuda:{known['uuid']}", f"cuda: {known['name']}")
    return DeviceIdentity(f"cuda:{physical}", f"cuda: {torch.cuda.get_device_name(index)}")


#: What makes two measurements comparable: the hardware's model and the software that runs the
#: step. Left out: ``device_uuid`` (one GPU's serial: another GPU of the same model measures
#: the same), ``host_memory_bytes`` (hosts of one model differ by what the firmware reserves),
#: ``platform`` (the kernel's patch level) and, on a CPU, ``device_memory_bytes`` (the host's
#: memory again).
_COMPARABLE_FIELDS = (
    "device_type",
    "device_name",
    "device_memory_bytes",
    "compute_capability",
    "cpu_model",
    "cpu_count",
    "torch",
    "cuda",
    "cudnn",
    "python",
)


def comparable_identity(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """The part of a fingerprint that decides whether two measurements may be ranked together.

    Two measurements are comparable when they ran on the same hardware model and the same
    software: device type, name, memory (a GPU's) and compute capability; the CPU's model and
    the cores the process could use (they set the data loader's and the CPU step's speed);
    the torch, CUDA, cuDNN and Python versions. The identity of one device (a GPU's UUID), the
    host's memory size and the kernel's version are not part of it: a job taken over by another
    GPU of the same model on another host of the same kind keeps its measurements.

    Example:
        >>> a = {"device_type": "cuda", "device_name": "<GPU name>", "device_uuid": "GPU-1",
        ...      "torch": "2.13.0"}
        >>> comparable_identity(a) == comparable_identity({**a, "device_uuid": "GPU-2"})
        True
        >>> comparable_identity(a) == comparable_identity({**a, "torch": "2.12.0"})
        False
    """
    identity = {name: fingerprint.get(name) for name in _COMPARABLE_FIELDS}
    if identity["device_type"] != "cuda":
        identity["device_memory_bytes"] = None
    return identity


def fingerprint_differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What changed between two fingerprints that makes their measurements incomparable, e.g.
    ``["torch 2.12.0 -> 2.13.0", "cpu_count 16 -> 8"]``; empty when they are comparable."""
    old, new = comparable_identity(before), comparable_identity(after)
    return [
        f"{name} {old[name]} -> {new[name]}"
        for name in _COMPARABLE_FIELDS
        if old[name] != new[name]
    ]
