"""Shared fixtures: the failing test workloads, fast measurement settings, databases."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

WORKLOADS = Path(__file__).parent / "workloads"

#: Measurement settings that keep a CPU trial to about two seconds of work.
FAST = {"warmup_steps": 1, "min_steps": 3, "min_seconds": 0.3}


def rows(db: str | Path, query: str) -> list[tuple[Any, ...]]:
    """The rows ``query`` reads from the SQLite file ``db`` (a job's stored trials, say)."""
    with contextlib.closing(sqlite3.connect(db)) as connection:
        return connection.execute(query).fetchall()


#: Packages whose releases have broken this suite before: their versions open every test run, so a
#: failure that appears with a new release is easy to place.
DRIFT_WATCHED = ("pytest", "schemathesis", "hypothesis", "optuna", "torch", "sqlalchemy")


@pytest.fixture(scope="session", autouse=True)
def _device_locks_of_this_session(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Trials of this test session queue on its own device locks, not on those of other test
    sessions or real runs on this machine (their waits would make timings here meaningless)."""
    os.environ["AUTOTUNE_LOCK_DIR"] = str(tmp_path_factory.mktemp("device-locks"))


def pytest_report_header(config: pytest.Config) -> str:
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return "versions: " + ", ".join(f"{name} {installed(name)}" for name in DRIFT_WATCHED)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by the marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test that takes the browser fixture is in the browser tier, marked or not, so that the
    # fast tier never needs Chromium.
    for item in items:
        if "browser" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)
    if torch.cuda.is_available():
        return
    skip_cuda = pytest.mark.skip(reason="needs a CUDA device; none is available here")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip_cuda)


#: The marks that take a test out of the fast tier (pyproject.toml's addopts leaves them out).
NOT_FAST = ("slow", "browser", "postgres", "cuda")


@pytest.fixture(autouse=True)
def _fast_tests_start_no_python(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test of the fast tier starts no Python process: a trial is one, and any of them takes
    seconds to import torch. A test that must start one is marked slow. Let through: a module's
    shared server, started by a module-scoped fixture before this one, and torch.compile's own
    compile workers."""
    if any(request.node.get_closest_marker(mark) for mark in NOT_FAST):
        return
    start = subprocess.Popen.__init__

    def refuse_python(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        one = isinstance(args, str | bytes | os.PathLike)
        argv = [os.fsdecode(arg) for arg in ([args] if one else args)]
        program = os.path.basename(argv[0].split()[0]) if argv and argv[0].strip() else ""
        if program.startswith("python") and not any("_inductor" in arg for arg in argv):
            pytest.fail(
                f"a fast test started a Python process ({' '.join(map(str, argv))[:200]}); "
                "mark the test @pytest.mark.slow"
            )
        start(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse_python)


@pytest.fixture
def workload_file() -> object:
    """The path of a test workload in tests/workloads/ by its stem, e.g. ``"raises"``."""

    def path(stem: str) -> str:
        return str(WORKLOADS / f"{stem}.py")

    return path


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "autotune.db")


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Tests never read a developer's own database or token.
    monkeypatch.delenv("AUTOTUNE_DB", raising=False)
    monkeypatch.delenv("AUTOTUNE_API_TOKEN", raising=False)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
