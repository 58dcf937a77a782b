"""Device utilisation through NVML, where a driver is present; silently absent elsewhere."""

from __future__ import annotations

import statistics
from typing import Any


def _nvml() -> Any | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no driver, no library, no device: NVML is optional by design
        return None


class UtilizationSampler:
    """Collects GPU utilisation (percent) of one device each time :meth:`sample` is called.

    The device is named by its UUID (``GPU-...``), never by an ordinal: NVML numbers GPUs in
    PCI order, CUDA fastest first and after ``CUDA_VISIBLE_DEVICES``, so ordinals disagree.
    """

    def __init__(self, device_uuid: str | None) -> None:
        self._nvml = _nvml() if device_uuid is not None else None
        self._handle = None
        if self._nvml is not None and device_uuid is not None:
            try:
                self._handle = self._nvml.nvmlDeviceGetHandleByUUID(device_uuid)
            except Exception:
                self._nvml = None
        self.samples: list[float] = []

    @property
    def available(self) -> bool:
        return self._handle is not None

    def sample(self) -> None:
        if self._handle is None or self._nvml is None:
            return
        try:
            rates = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            self.samples.append(float(rates.gpu))
        except Exception:
            self._handle = None

    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None


def nvml_devices() -> list[dict[str, Any]]:
    """Every GPU NVML sees: name, memory, utilisation and driver (empty without NVML)."""
    nvml = _nvml()
    if nvml is None:
        return []
    devices = []
    try:
        driver = nvml.nvmlSystemGetDriverVersion()
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            rates = nvml.nvmlDeviceGetUtilizationRates(handle)
            name = nvml.nvmlDeviceGetName(handle)
            devices.append({
                "index": index,
                "name": name.decode() if isinstance(name, bytes) else name,
                "memory_total_bytes": int(memory.total),
                "memory_used_bytes": int(memory.used),
                "utilization_percent": float(rates.gpu),
                "driver": driver.decode() if isinstance(driver, bytes) else driver,
            })
    except Exception:
        return devices
    return devices
