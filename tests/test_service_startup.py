"""``autotune serve`` and ``autotune worker`` refuse what they cannot start with one sentence
and exit code 2 (invalid input), never a traceback: a lock directory they cannot use, a
workloads directory that does not exist."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest_service import AUTOTUNE, clean_env

from autotune.store import LOCK_DIR_ENV

pytestmark = pytest.mark.slow  # each starts the real command


def autotune(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AUTOTUNE, *args], env=clean_env(**env), capture_output=True, text=True, timeout=120
    )


def assert_one_sentence(completed: subprocess.CompletedProcess[str], *words: str) -> None:
    assert completed.returncode == 2, completed.stdout + completed.stderr
    assert "Traceback" not in completed.stderr, completed.stderr
    errors = [line for line in completed.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("autotune: error: "), completed.stderr
    line = errors[0]
    assert all(word in line for word in words), line


def blocked_lock_dir(tmp_path: Path) -> str:
    """A lock directory that cannot be created, whoever runs the test: its parent is a file."""
    (tmp_path / "a-file").write_text("")
    return str(tmp_path / "a-file" / "locks")


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_a_lock_directory_that_cannot_be_created_is_one_sentence(
    command: str, tmp_path: Path
) -> None:
    completed = autotune(
        [command, "--db", f"sqlite:///{tmp_path / 'jobs.db'}", "--device", "cpu"],
        **{LOCK_DIR_ENV: blocked_lock_dir(tmp_path)},
    )
    assert_one_sentence(completed, "lock directory", LOCK_DIR_ENV)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into any directory")
def test_a_lock_directory_this_user_cannot_write_is_one_sentence(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o500)
    completed = autotune(
        ["serve", "--db", f"sqlite:///{tmp_path / 'jobs.db'}", "--device", "cpu"],
        **{LOCK_DIR_ENV: str(locks)},
    )
    assert_one_sentence(completed, "not writable", LOCK_DIR_ENV)


def test_a_worker_with_a_missing_workloads_directory_is_one_sentence(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-workloads"
    completed = autotune(
        ["worker", "--db", f"sqlite:///{tmp_path / 'jobs.db'}", "--workloads-dir", str(missing)]
    )
    assert_one_sentence(completed, str(missing), "does not exist", "--workloads-dir")
