"""The device and software a measurement was taken on, stored with every result."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import psutil
import torch

from autotune.errors import ConfigError
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
        raise ConfigError(f"--device {requested!r} is not a device; use auto, cpu or cuda:N") \
            from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"--device {requested}: no CUDA device is available here; "
                              "use --device cpu")
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise ConfigError(f"--device {requested}: only {torch.cuda.device_count()} CUDA "
                              "device(s) exist; pick an index below that")
        return torch.device("cuda", index)
    if device.type != "cpu":
        raise ConfigError(f"--device {requested}: only cpu and cuda devices are supported")
    return device


def _nvml_uuid(props: Any) -> str | None:
    """The device's UUID in NVML's spelling ("GPU-" and the hex digits with dashes)."""
    uuid = getattr(props, "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def device_info(device: torch.device) -> DeviceInfo:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return DeviceInfo(
            type="cuda",
            index=device.index or 0,
            uuid=_nvml_uuid(props),
            name=props.name,
            memory_bytes=int(props.total_memory),
            bf16_supported=bool(torch.cuda.is_bf16_supported()),
            bf16_native=props.major >= 8,
            compute_capability=(props.major, props.minor),
            cpu_count=cpu_count(),
        )
    return DeviceInfo(
        type="cpu",
        name=cpu_model(),
        memory_bytes=int(psutil.virtual_memory().total),
        bf16_supported=True,  # CPU autocast runs bf16 everywhere; whether it pays is measured
        bf16_native=bool(_CPU_BF16_FLAGS & cpu_flags()),
        cpu_count=cpu_count(),
    )


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
