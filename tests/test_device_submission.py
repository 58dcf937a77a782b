"""A job names the device class it needs at submission; only a matching worker claims it.

A real ``autotune serve`` on loopback and real ``autotune worker`` processes, on SQLite and on
the PostgreSQL server.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conftest_service
import httpx
import pytest
from conftest_service import (
    AUTOTUNE,
    FAST_JOB,
    HEARTBEAT_TIMEOUT_S,
    clean_env,
    start_service,
    wait_for,
)

from autotune.measure import device_identity

pytestmark = pytest.mark.slow

ELSEWHERE = "cuda: NVIDIA H100 80GB HBM3"  # a class no worker here has


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None  # start_service's own SQLite file
    else:
        yield from conftest_service.postgres_schema_url()


def submit(http: httpx.Client, **options: Any) -> dict[str, Any]:
    response = http.post(
        "/v1/jobs", json={"workload": "tiny", **FAST_JOB, "fresh": True, **options}
    )
    assert response.status_code == 202, response.text
    job: dict[str, Any] = response.json()
    return job


def devices(http: httpx.Client) -> dict[str, int]:
    page = http.get("/v1/devices").json()
    assert page["count"] == len(page["data"])
    return {entry["device_class"]: entry["workers"] for entry in page["data"]}


def autotune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AUTOTUNE, *args], capture_output=True, text=True, timeout=60, env=clean_env()
    )


def test_a_job_runs_only_on_the_device_class_it_names_and_says_what_it_waits_for(
    db_url: str | None,
    tmp_path: Path,
) -> None:
    here = device_identity("auto").device_class
    service = start_service(tmp_path, db_url=db_url)
    try:
        with service.client() as http:
            assert devices(http) == {}
            unserved = submit(http)
            assert unserved["waiting_for"].startswith("no worker is running")
            http.post(f"/v1/jobs/{unserved['id']}/cancel")

            worker = service.start_worker()
            wait_for(lambda: devices(http) == {here: 1}, 60, "the worker's device class")
            shown = autotune("devices", "--server", service.base_url)
            assert shown.returncode == 0 and here in shown.stdout, shown.stderr

            elsewhere = submit(http, device_class=ELSEWHERE)
            assert elsewhere["device_class"] == ELSEWHERE and elsewhere["status"] == "queued"
            assert f"no live worker has device class {ELSEWHERE!r}" in elsewhere["waiting_for"]
            served = submit(http, device_class=here)
            assert served["waiting_for"] is None

            def finished() -> dict[str, Any] | None:
                job: dict[str, Any] = http.get(f"/v1/jobs/{served['id']}").json()
                return job if job["status"] in ("succeeded", "failed") else None

            job = wait_for(finished, 300, "the job for this device class to finish")
            assert job["status"] == "succeeded", (job["error"], service.logs())
            assert job["device_class"] == here and job["waiting_for"] is None

            # The worker polled the queue all along and never took the other job.
            waiting = http.get(f"/v1/jobs/{elsewhere['id']}").json()
            assert (waiting["status"], waiting["worker_id"], waiting["attempts"]) == (
                "queued",
                None,
                0,
            )
            assert ELSEWHERE in waiting["waiting_for"]
            listed = {j["id"]: j for j in http.get("/v1/jobs").json()["data"]}
            assert listed[elsewhere["id"]]["waiting_for"] == waiting["waiting_for"]

            worker.stop()  # it signs off: its class is no longer offered
            assert worker.popen.returncode == 0, worker.output()
            assert devices(http) == {}
    finally:
        service.stop()


def test_a_silent_worker_s_class_is_no_longer_listed(tmp_path: Path) -> None:
    service = start_service(tmp_path)
    try:
        with service.client() as http:
            worker = service.start_worker()
            wait_for(lambda: devices(http) != {}, 60, "the worker's device class")
            worker.kill_tree()  # no sign-off: it just stops announcing itself
            assert devices(http) != {}
            time.sleep(HEARTBEAT_TIMEOUT_S + 1)
            assert devices(http) == {}
    finally:
        service.stop()


@pytest.fixture(scope="module")
def idle_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[conftest_service.Service]:
    service = start_service(tmp_path_factory.mktemp("idle"))
    yield service
    service.stop()


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"device_class": "H100"}, "is not 'cuda: MODEL' or 'cpu: MODEL, N cores'"),
        ({"device_class": "cpu: AMD EPYC 9454"}, "is not 'cuda: MODEL' or 'cpu: MODEL, N cores'"),
        ({"device_class": ELSEWHERE, "device": "cpu"}, "cannot run a job for device class"),
        ({"device_class": "x" * 600}, "at most 512 characters"),
        ({"on_new_hardware": "sometimes"}, "'fresh' or 'refuse'"),
    ],
)
def test_a_malformed_device_class_is_a_clear_422(
    options: dict[str, Any],
    complaint: str,
    idle_service: conftest_service.Service,
) -> None:
    with idle_service.client() as http:
        response = http.post("/v1/jobs", json={"workload": "tiny", **options})
        assert response.status_code == 422, response.text
        assert complaint in response.text
        cli = autotune(
            "submit",
            "tiny",
            "--server",
            idle_service.base_url,
            *[f"--{k.replace('_', '-')}={v}" for k, v in options.items()],
        )
        assert cli.returncode != 0 and complaint in cli.stdout + cli.stderr, cli
        assert http.get("/v1/jobs").json()["count"] == 0
