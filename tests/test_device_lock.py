"""The device lock across real processes: one holder per (host, device), whoever asks."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import conftest_service
import pytest

from autotune.store import LOCK_DIR_ENV, device_lock, try_file_lock

postgres_url = pytest.fixture(conftest_service.postgres_schema_url)

#: Holds ``device`` three times for 0.3 s each and prints the intervals it held it.
HOLDER = """
import json, sys, time
from autotune.store import Database, device_lock
db = Database(sys.argv[2]) if sys.argv[2] != "-" else None
held = []
for _ in range(3):
    with device_lock(db, sys.argv[1]) as ok:
        assert ok
        start = time.time()
        time.sleep(0.3)
        held.append((start, time.time()))
print(json.dumps(held))
"""


def hold_in_processes(
    devices: list[str], lock_dirs: list[Path], db_url: str = "-"
) -> list[tuple[float, float]]:
    holders = [
        subprocess.Popen(
            [sys.executable, "-c", HOLDER, device, db_url],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, LOCK_DIR_ENV: str(lock_dir)},
        )
        for device, lock_dir in zip(devices, lock_dirs, strict=True)
    ]
    intervals: list[tuple[float, float]] = []
    for holder in holders:
        out, _ = holder.communicate(timeout=60)
        assert holder.returncode == 0
        intervals += [tuple(pair) for pair in json.loads(out)]  # type: ignore[misc]
    return sorted(intervals)


def overlaps(intervals: list[tuple[float, float]]) -> int:
    return sum(later[0] < earlier[1] for earlier, later in itertools.pairwise(intervals))


@pytest.mark.slow
def test_processes_holding_one_device_take_turns(tmp_path: Path) -> None:
    intervals = hold_in_processes(["cuda:0"] * 3, [tmp_path] * 3)
    assert len(intervals) == 9 and overlaps(intervals) == 0


@pytest.mark.slow
def test_different_devices_do_not_wait_for_each_other(tmp_path: Path) -> None:
    """The control: the same holders overlap when the devices differ, so the test above could
    see an overlap if the lock did not hold."""
    intervals = hold_in_processes(["cuda:0", "cuda:1", "cpu"], [tmp_path] * 3)
    assert overlaps(intervals) > 0


@pytest.mark.postgres
def test_on_postgresql_the_advisory_lock_serializes_without_a_shared_lock_dir(
    postgres_url: str,
    tmp_path: Path,
) -> None:
    """Two containers on one host share the database but not /tmp: the advisory lock keyed
    by host and device still makes them take turns."""
    lock_dirs = [tmp_path / "a", tmp_path / "b"]
    assert overlaps(hold_in_processes(["cuda:0"] * 2, lock_dirs)) > 0  # files alone: no
    assert overlaps(hold_in_processes(["cuda:0"] * 2, lock_dirs, postgres_url)) == 0


def test_waiting_for_a_device_ends_when_cancelled() -> None:
    cancel = threading.Event()
    with device_lock(None, "cuda:7") as held:
        assert held
        threading.Timer(0.3, cancel.set).start()
        started = time.monotonic()
        with device_lock(None, "cuda:7", cancel) as second:
            assert second is False
        assert 0.2 < time.monotonic() - started < 2


@pytest.mark.slow
def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    env = {**os.environ, LOCK_DIR_ENV: str(tmp_path)}
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from autotune.store import device_lock\n"
            "with device_lock(None, 'cpu'):\n    print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    os.environ[LOCK_DIR_ENV], before = str(tmp_path), os.environ.get(LOCK_DIR_ENV)
    try:
        assert try_file_lock("device-cpu") is None
        holder.kill()
        holder.wait(10)
        handle = try_file_lock("device-cpu")
        assert handle is not None
        handle.close()
    finally:
        if before is not None:
            os.environ[LOCK_DIR_ENV] = before
