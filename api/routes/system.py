"""/v1/system: the devices, CPU and software versions of the server."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter

from autotune.measure import nvml_devices
from autotune.measure._fingerprint import cpu_count, cpu_model

from ..schemas import CpuPublic, SystemPublic

router = APIRouter(prefix="/system", tags=["system"])

_PACKAGES = ("autotune", "torch", "optuna", "sqlalchemy", "fastapi", "uvicorn")


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


@router.get("", response_model=SystemPublic)
def read_system() -> SystemPublic:
    """GPUs through NVML (name, memory, utilisation, driver), the CPU and the versions."""
    versions = {"python": platform.python_version(), **{p: _version(p) for p in _PACKAGES}}
    return SystemPublic(
        devices=nvml_devices(),
        cpu=CpuPublic(model=cpu_model(), count=cpu_count()),
        versions=versions,
    )
