"""Jobs that really run: a real server and real worker processes, driven over HTTP.

A full job to its recommendation (the server's embedded worker), a worker killed with
SIGKILL mid-job and replaced, and a cancel that stops the running trial.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import psutil
import pytest
from conftest_service import (
    FAST_JOB,
    Process,
    Service,
    running_trials,
    start_service,
    wait_for,
)

from autotune.store import Trial, open_database

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = start_service(tmp_path_factory.mktemp("jobs"))
    yield running
    running.stop()


@pytest.fixture(autouse=True)
def _workers_stop_after_each_test(service: Service) -> Iterator[None]:
    yield
    service.stop_workers()


def job_state(http: httpx.Client, job_id: int) -> dict[str, Any]:
    response = http.get(f"/v1/jobs/{job_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


def submit_new_job(http: httpx.Client, **options: Any) -> int:
    """Submit a tiny job that must run anew (``fresh``: an earlier test's answer is not reused)."""
    response = http.post(
        "/v1/jobs", json={"workload": "tiny", **FAST_JOB, **options, "fresh": True}
    )
    assert response.status_code == 202, response.text
    return int(response.json()["id"])


def wait_until_finished(http: httpx.Client, job_id: int, timeout_s: float) -> dict[str, Any]:
    return wait_for(
        lambda: (
            (job := job_state(http, job_id))["status"] in ("succeeded", "failed", "cancelled")
            and job
        ),
        timeout_s,
        f"job {job_id} to finish",
    )


def trial_processes(worker: Process) -> list[psutil.Process]:
    """Every process under the worker: its fork server (alive between trials) and the trials."""
    return psutil.Process(worker.pid).children(recursive=True)


def stored_trials(service: Service, job_id: int) -> list[Trial]:
    db = open_database(service.db_url)
    try:
        with db.session() as session:
            rows = list(session.query(Trial).filter(Trial.job_id == job_id).order_by(Trial.number))
            session.expunge_all()
            return rows
    finally:
        db.dispose()


def test_a_full_job_on_the_embedded_worker_ends_in_a_recommendation(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # `autotune serve` as users start it: API and one worker in one process.
    service = start_service(tmp_path_factory.mktemp("embedded"), embedded_worker=True)
    try:
        with service.client() as http:
            submitted = http.post("/v1/jobs", json={"workload": "builtin:slow-storage", **FAST_JOB})
            assert submitted.status_code == 202
            job_id = submitted.json()["id"]
            job = wait_until_finished(http, job_id, 150)
            assert job["status"] == "succeeded", job["error"]
            assert job["recommendation_ready"] and job["attempts"] == 1
            assert job["progress"]["trials_done"] == FAST_JOB["n_trials"]
            assert job["progress"]["best"]["samples_per_s"] > 0
            document = http.get(f"/v1/jobs/{job_id}/recommendation").json()
            assert document["schema"] == "autotune.recommendation/v1"
            assert document["workload"] == "slow-storage"
            assert set(document["config"]) >= {"batch_size", "num_workers", "amp"}
            trials = http.get(f"/v1/jobs/{job_id}/trials").json()
            assert trials["count"] == len(trials["data"]) >= FAST_JOB["n_trials"]
            assert {t["outcome"] for t in trials["data"]} == {"ok"}
    finally:
        service.stop()


def test_a_worker_killed_mid_job_is_replaced_and_nothing_is_lost_or_repeated(
    service: Service,
) -> None:
    first = service.start_worker()
    with service.client() as http:
        job_id = submit_new_job(http)
        # Kill it while a trial runs, after at least two have finished.
        wait_for(
            lambda: (
                job_state(http, job_id)["progress"]["trials_done"] >= 2 and running_trials(first)
            ),
            120,
            "two finished trials and a third running",
        )
        first.kill_tree()
        before = {t.number: t for t in stored_trials(service, job_id)}
        assert job_state(http, job_id)["status"] == "running"  # until its heartbeat is stale

        service.start_worker()
        job = wait_until_finished(http, job_id, 180)
        assert job["status"] == "succeeded", (job["error"], service.logs())
        assert job["attempts"] == 2
        assert http.get(f"/v1/jobs/{job_id}/recommendation").status_code == 200

    after = stored_trials(service, job_id)
    numbers = [(t.phase, t.number) for t in after]
    assert len(numbers) == len(set(numbers))
    by_number = {t.number: t for t in after}
    for number, trial in before.items():  # every finished trial is still there, unchanged
        kept = by_number[number]
        assert (kept.config_key, kept.outcome, kept.samples_per_s) == (
            trial.config_key,
            trial.outcome,
            trial.samples_per_s,
        )
    searched = [t.config_key for t in after if t.phase != "confirm" and not t.interrupted]
    assert len(searched) == len(set(searched)) == FAST_JOB["n_trials"]  # none measured twice
    # The search trial the kill interrupted is recorded as such (and was retried once).
    killed_in_search = sum(t.phase != "confirm" for t in before.values()) < FAST_JOB["n_trials"]
    interrupted = [t for t in after if t.interrupted]
    assert len(interrupted) == int(killed_in_search)
    assert all(t.outcome == "crashed" and t.number not in before for t in interrupted)


def test_cancel_stops_the_running_trial_and_keeps_what_was_measured(service: Service) -> None:
    worker = service.start_worker()
    with service.client() as http:
        job_id = submit_new_job(http, n_trials=20)
        wait_for(
            lambda: (
                job_state(http, job_id)["progress"]["trials_done"] >= 1 and running_trials(worker)
            ),
            120,
            "a finished trial and a running one",
        )
        response = http.post(f"/v1/jobs/{job_id}/cancel")
        assert response.status_code == 202
        assert response.json()["cancel_requested"] is True
        job = wait_until_finished(http, job_id, 20)
        assert job["status"] == "cancelled"
        assert job["progress"]["trials_done"] >= 1
        wait_for(lambda: not trial_processes(worker), 10, "the trial processes to exit")
        assert http.get(f"/v1/jobs/{job_id}/recommendation").status_code == 409


def test_a_worker_stopped_with_sigterm_puts_its_job_back_for_another(service: Service) -> None:
    worker = service.start_worker()
    with service.client() as http:
        job_id = submit_new_job(http)
        wait_for(
            lambda: job_state(http, job_id)["status"] == "running" and trial_processes(worker),
            120,
            "a running trial",
        )
        children = trial_processes(worker)
        worker.popen.terminate()
        assert worker.popen.wait(timeout=30) == 0, service.logs()
        assert not any(child.is_running() for child in children)
        job = job_state(http, job_id)
        # Straight back to the queue, its attempt given back: a shutdown is not a failure.
        assert (job["status"], job["worker_id"], job["attempts"]) == ("queued", None, 0)
        assert http.post(f"/v1/jobs/{job_id}/cancel").json()["status"] == "cancelled"
