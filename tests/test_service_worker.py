"""The worker around a stand-in job runner: heartbeat, cancel, shutdown, a runner that fails."""

from __future__ import annotations

import threading
import time
from typing import Any

import conftest_service
import pytest
from conftest_service import add_job, wait_for

from autotune.service import ClaimPolicy, Worker, claim_next
from autotune.store import Database, Job, utcnow
from autotune.tuner import load_job

database_url, database = conftest_service.database_url, conftest_service.database


def set_status(db: Database, job_id: int, status: str, owner: str | None = None) -> None:
    """Finish a job, as run_job does: with ``owner``, only while that worker holds it."""
    with db.session(immediate=True) as session:
        job = session.get(Job, job_id)
        assert job is not None
        if owner is None or job.worker_id == owner:
            job.status, job.finished_at = status, utcnow()


class FakeRunner:
    """Runs a job by waiting ``seconds`` or until cancelled, as run_job would end it."""

    def __init__(self, seconds: float = 30.0) -> None:
        self.seconds = seconds
        self.started = threading.Event()
        self.cancelled = False

    def __call__(
        self, db: Database, job_id: int, *, cancel: threading.Event, worker_id: str
    ) -> Any:
        self.started.set()
        self.cancelled = cancel.wait(self.seconds)
        set_status(db, job_id, "cancelled" if self.cancelled else "succeeded", worker_id)


def make_worker(db: Database, runner: Any) -> Worker:
    return Worker(
        db,
        ClaimPolicy(stale_after_s=1.0),
        heartbeat_interval_s=0.2,
        poll_interval_s=0.05,
        worker_id="test-worker",
        run_job=runner,
    )


def in_thread(target: Any) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_the_lease_is_renewed_while_the_job_runs(database: Database) -> None:
    job_id = add_job(database)
    runner = FakeRunner(seconds=2.0)
    worker = make_worker(database, runner)
    thread = in_thread(worker.run_once)
    runner.started.wait(10)
    while thread.is_alive():
        # With a 1 s timeout, a 2 s job would be taken over without its heartbeats.
        with database.session(immediate=True) as session:
            assert (
                claim_next(session, "other", worker.policy, device_class=worker.device_class)
                is None
            )
        time.sleep(0.1)
    job = load_job(database, job_id)
    assert (job.status, job.attempts, job.worker_id) == ("succeeded", 1, "test-worker")
    assert not runner.cancelled


def test_a_requested_cancel_stops_the_job_within_a_heartbeat(database: Database) -> None:
    job_id = add_job(database)
    runner = FakeRunner()
    thread = in_thread(make_worker(database, runner).run_once)
    runner.started.wait(10)
    asked = time.monotonic()
    with database.session(immediate=True) as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.cancel_requested = True
    thread.join(10)
    assert runner.cancelled and time.monotonic() - asked < 2
    assert load_job(database, job_id).status == "cancelled"


def test_stopping_the_worker_puts_its_job_back_in_the_queue(database: Database) -> None:
    job_id = add_job(database)
    runner = FakeRunner()
    worker = make_worker(database, runner)
    thread = in_thread(worker.run)
    runner.started.wait(10)
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()
    job = load_job(database, job_id)
    # Straight back to queued (never cancelled on the way), and the attempt is not spent.
    assert (job.status, job.worker_id, job.attempts) == ("queued", None, 0)


def test_a_runner_that_raises_fails_the_job_and_the_worker_goes_on(database: Database) -> None:
    def broken(db: Database, job_id: int, *, cancel: threading.Event, worker_id: str) -> None:
        raise RuntimeError("boom")

    first, second = add_job(database), add_job(database)
    worker = make_worker(database, broken)
    assert worker.run_once() == first
    assert worker.run_once() == second
    job = load_job(database, first)
    assert job.status == "failed"
    assert job.error == (
        f"job {first} hit an internal error (RuntimeError: boom); report it with the worker log"
    )


def test_a_worker_that_lost_its_job_stops_the_trial(database: Database) -> None:
    job_id = add_job(database)
    runner = FakeRunner()
    thread = in_thread(make_worker(database, runner).run_once)
    runner.started.wait(10)
    with database.session(immediate=True) as session:  # another worker took it over
        job = session.get(Job, job_id)
        assert job is not None
        job.worker_id = "other"
    thread.join(10)
    assert runner.cancelled
    wait_for(lambda: not thread.is_alive(), 5, "the worker to return")


def test_heartbeat_interval_must_leave_room_before_the_timeout(database: Database) -> None:
    with pytest.raises(ValueError, match="at most half"):
        Worker(database, ClaimPolicy(stale_after_s=4), heartbeat_interval_s=3)
