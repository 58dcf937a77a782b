"""The public surface is exactly what is meant to be public."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest

import autotune

EXPECTED = {
    "autotune": {
        "AutotuneError",
        "Config",
        "ConfigError",
        "NoFeasibleConfigError",
        "Recommendation",
        "StoreError",
        "TuneOptions",
        "Workload",
        "WorkloadError",
        "load_recommendation",
    },
}


def test_top_level_all_is_exactly_the_public_names() -> None:
    assert set(autotune.__all__) == EXPECTED["autotune"]
    public = {name for name in vars(autotune) if not name.startswith("_")}
    # Subpackages are importable attributes too; everything else public must be in __all__.
    modules = {name for name in public if isinstance(getattr(autotune, name), type(autotune))}
    assert public - modules == set(autotune.__all__)


@pytest.mark.parametrize(
    "package",
    [
        "autotune.space",
        "autotune.search",
        "autotune.runner",
        "autotune.measure",
        "autotune.store",
        "autotune.recommend",
        "autotune.tuner",
        "autotune.workload",
        "autotune.report",
    ],
)
def test_each_stage_exports_what_its_all_lists(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__, f"{package} has an empty __all__"
    for name in module.__all__:
        assert hasattr(module, name), f"{package}.__all__ lists missing {name}"


def test_the_distribution_has_a_name_of_its_own_and_the_autotune_command() -> None:
    """PyPI's ``autotune`` and ``pytorch-autotune`` are other projects: ``pip install`` of either
    would install someone else's code."""
    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert pyproject["project"]["name"] == "autotune-train"
    assert pyproject["project"]["scripts"] == {"autotune": "autotune.cli:main"}
