"""Database URLs are shown with their password hidden, in errors and in logs."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import conftest_service
import pytest
from conftest_service import AUTOTUNE, clean_env

from autotune.errors import StoreError
from autotune.store import open_database

pytestmark = pytest.mark.slow

PASSWORD = "hunter2-do-not-print"


def with_password(url: str) -> str:
    scheme, rest = url.split("://", 1)
    user, location = rest.split("@", 1)
    return f"{scheme}://{user}:{PASSWORD}@{location}"


def test_an_unreachable_database_is_named_without_its_password() -> None:
    url = with_password("postgresql+psycopg://postgres@127.0.0.1:1/test?connect_timeout=2")
    with pytest.raises(StoreError) as info:
        open_database(url)
    assert PASSWORD not in str(info.value) and "postgres:***@127.0.0.1:1" in str(info.value)
    run = subprocess.run(
        [*AUTOTUNE, "worker", "--db", url],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
    )
    assert run.returncode == 1 and "cannot open database" in run.stderr
    assert PASSWORD not in run.stdout + run.stderr


postgres_url = pytest.fixture(conftest_service.postgres_schema_url)


@pytest.mark.postgres
def test_a_worker_logs_its_database_without_the_password(
    postgres_url: str,
    tmp_path: Path,
) -> None:
    log = tmp_path / "worker.log"
    with log.open("wb") as out:  # the test server trusts any password
        worker = subprocess.Popen(
            [*AUTOTUNE, "worker", "--db", with_password(postgres_url)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=clean_env(),
        )
    try:
        deadline = time.monotonic() + 60
        while "started on" not in log.read_text() and time.monotonic() < deadline:
            assert worker.poll() is None, log.read_text()
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    text = log.read_text()
    assert "started on postgresql+psycopg://postgres:***@" in text, text
    assert PASSWORD not in text
