"""What ``autotune version`` prints: the versions and the device a bug report needs."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version

import torch

from autotune import __version__
from autotune.measure import device_identity

#: The libraries whose versions change what autotune measures or stores.
LIBRARIES = ("optuna", "sqlalchemy", "numpy", "fastapi")


def _library(name: str) -> str:
    try:
        return installed_version(name)
    except PackageNotFoundError:
        return "not installed"


def _devices() -> list[str]:
    """Each device's class, as jobs and ``--device-class`` name it."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    requested = ["cpu", *(f"cuda:{index}" for index in range(gpus))]
    return [device_identity(device).device_class for device in requested]


def versions_report() -> list[tuple[str, str]]:
    """(name, value) rows: autotune, Python, torch and its CUDA build, the libraries, devices."""
    cuda = torch.version.cuda
    rows = [
        ("autotune", __version__),
        ("python", platform.python_version()),
        ("torch", torch.__version__),
        ("cuda build", cuda if cuda else "none (a CPU build of torch)"),
        ("cuda", "available" if torch.cuda.is_available() else "not available"),
    ]
    rows += [(name, _library(name)) for name in LIBRARIES]
    rows += [("device", device) for device in _devices()]
    return rows
