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


def _handle(nvml: Any, device: int | str) -> Any:
    """NVML's handle of a GPU given by UUID ("GPU-...") or, failing that, by NVML ordinal."""
    if isinstance(device, str):
        return nvml.nvmlDeviceGetHandleByUUID(device.encode())
    return nvml.nvmlDeviceGetHandleByIndex(device)


class UtilizationSampler:
    """Collects the busy fraction (0..1) of one GPU each time :meth:`sample` is called.

    The GPU is named by its UUID: a trial process that sees only its own GPU calls it
    ``cuda:0`` whatever its place on the machine, and NVML's ordinals need not follow CUDA's,
    so an ordinal can name the wrong GPU. An integer ordinal is accepted where no UUID is known.
    NVML reports percent; the sampler stores fractions, as every stored number is.
    """

    def __init__(self, device: int | str | None, nvml: Any | None = None) -> None:
        self._nvml = (nvml or _nvml()) if device is not None else None
        self._handle = None
        if self._nvml is not None and device is not None:
            try:
                self._handle = _handle(self._nvml, device)
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
            self.samples.append(float(rates.gpu) / 100.0)
        except Exception:
            self._handle = None

    def mean(self) -> float | None:
        """The mean busy fraction over the samples (0..1), or None without any."""
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
            uuid = nvml.nvmlDeviceGetUUID(handle)
            devices.append(
                {
                    "index": index,
                    "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_total_bytes": int(memory.total),
                    "memory_used_bytes": int(memory.used),
                    "utilization_percent": float(rates.gpu),
                    "driver": driver.decode() if isinstance(driver, bytes) else driver,
                }
            )
    except Exception:
        return devices
    return devices
