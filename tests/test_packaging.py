"""The wheel: autotune and the REST API as autotune_api, never a top-level `api`."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parent.parent


def test_the_wheel_installs_the_api_as_autotune_api_with_every_package(tmp_path: Path) -> None:
    source = tmp_path / "source"  # a copy: building writes build/ and *.egg-info into it
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "*.egg-info", "tests", "benchmarks", "__pycache__"
        ),
    )
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(source),
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("autotune_train-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {
        name.split("/")[0]
        for name in names
        if not name.split("/")[0].endswith((".dist-info", ".data"))
    }
    assert tops == {"autotune", "autotune_api"}
    # Every package folder of the source tree is in the wheel (the list in pyproject.toml is
    # explicit because of the api -> autotune_api mapping).
    for init in [*ROOT.glob("autotune/**/__init__.py"), *ROOT.glob("api/**/__init__.py")]:
        relative = init.relative_to(ROOT).as_posix()
        installed = (
            relative.replace("api/", "autotune_api/", 1)
            if relative.startswith("api/")
            else relative
        )
        assert installed in names, f"{relative} is missing from the wheel"
    assert "autotune/store/migrations/script.py.mako" in names
    assert "autotune/store/migrations/versions/0001_initial.py" in names
    assert "autotune/py.typed" in names


def test_the_api_is_importable_only_as_autotune_api(tmp_path: Path) -> None:
    # From a directory without the source tree on sys.path: what an installed user sees.
    probe = (
        "import importlib.util, autotune_api.main; print(importlib.util.find_spec('api') is None)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
