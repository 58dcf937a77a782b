"""The job queue on SQLite and PostgreSQL: atomic claims, stale-heartbeat takeover, cancel."""

from __future__ import annotations

import threading
from datetime import timedelta

import conftest_service
import pytest
import time_machine
from conftest_service import add_job
from sqlalchemy import func, select, update

from autotune.service import (
    ClaimPolicy,
    JobNotFoundError,
    JobStateError,
    claim_next,
    heartbeat,
    release,
    request_cancel,
)
from autotune.store import Database, Job, utcnow
from autotune.tuner import load_job

database_url, database = conftest_service.database_url, conftest_service.database

POLICY = ClaimPolicy(stale_after_s=30, max_attempts=3)


def claim(db: Database, worker_id: str = "w1") -> int | None:
    with db.session(immediate=True) as session:
        job = claim_next(session, worker_id, POLICY)
        return None if job is None else job.id


def test_claim_takes_the_oldest_queued_job_and_owns_it(database: Database) -> None:
    first, second = add_job(database), add_job(database)
    assert claim(database, "w1") == first
    job = load_job(database, first)
    assert (job.status, job.worker_id, job.attempts) == ("running", "w1", 1)
    assert job.heartbeat_at is not None and job.started_at is not None
    assert claim(database, "w2") == second
    assert claim(database, "w3") is None


def test_concurrent_claims_never_share_a_job(database: Database) -> None:
    ids = {add_job(database) for _ in range(24)}
    claimed: dict[str, list[int]] = {}

    def drain(worker_id: str) -> None:
        mine = claimed.setdefault(worker_id, [])
        while (job_id := claim(database, worker_id)) is not None:
            mine.append(job_id)

    threads = [threading.Thread(target=drain, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    every = [job_id for jobs in claimed.values() for job_id in jobs]
    assert sorted(every) == sorted(ids)  # each job exactly once
    assert all(load_job(database, job_id).attempts == 1 for job_id in ids)


def _age_heartbeat(db: Database, job_id: int, seconds: float) -> None:
    with db.session() as session:
        session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(heartbeat_at=utcnow() - timedelta(seconds=seconds))
        )


def test_a_running_job_with_a_stale_heartbeat_is_taken_over(database: Database) -> None:
    job_id = add_job(database)
    assert claim(database, "dead") == job_id
    _age_heartbeat(database, job_id, 5)
    assert claim(database, "alive") is None  # 5 s old: its worker may just be slow
    _age_heartbeat(database, job_id, 60)
    assert claim(database, "alive") == job_id
    job = load_job(database, job_id)
    assert (job.worker_id, job.attempts, job.status) == ("alive", 2, "running")
    # The dead worker learns it lost the job at its next heartbeat.
    with database.session() as session:
        assert heartbeat(session, job_id, "dead") is None
        assert heartbeat(session, job_id, "alive") is False


def test_a_job_running_without_heartbeat_is_never_taken(database: Database) -> None:
    # What `autotune run` leaves while it runs a job in its own process.
    add_job(database, status="running")
    assert claim(database) is None


def test_an_abandoned_job_out_of_attempts_fails_with_a_reason(database: Database) -> None:
    job_id = add_job(
        database,
        status="running",
        attempts=3,
        worker_id="gone",
        heartbeat_at=utcnow() - timedelta(minutes=5),
    )
    assert claim(database) is None
    job = load_job(database, job_id)
    assert job.status == "failed"
    assert "lost its worker 3 times" in (job.error or "")


def test_cancel_a_queued_job_at_once_and_a_running_one_through_its_worker(
    database: Database,
) -> None:
    queued, running = add_job(database), add_job(database)
    assert claim(database, "w1") == queued
    with database.session() as session:
        # `queued` was claimed first; cancel the other, still queued, one.
        assert request_cancel(session, running).status == "cancelled"
        job = request_cancel(session, queued)
        assert (job.status, job.cancel_requested) == ("running", True)
        assert heartbeat(session, queued, "w1") is True


def test_cancel_of_a_dead_workers_job_finishes_it_on_the_next_claim(database: Database) -> None:
    job_id = add_job(database)
    claim(database, "dead")
    with database.session() as session:
        request_cancel(session, job_id)
    _age_heartbeat(database, job_id, 60)
    assert claim(database, "alive") is None
    assert load_job(database, job_id).status == "cancelled"


def test_cancel_refuses_finished_jobs_and_unknown_ids(database: Database) -> None:
    done = add_job(database, status="succeeded")
    with database.session() as session:
        with pytest.raises(JobStateError, match=f"job {done} already succeeded"):
            request_cancel(session, done)
        with pytest.raises(JobNotFoundError, match="job 999 does not exist"):
            request_cancel(session, 999)


def test_release_requeues_a_job_for_another_worker(database: Database) -> None:
    job_id = add_job(database)
    claim(database, "w1")
    with database.session() as session:
        assert not release(session, job_id, "someone-else")
        assert release(session, job_id, "w1")
    assert load_job(database, job_id).status == "queued"
    assert claim(database, "w2") == job_id
    # A shutdown is not a failure: the released attempt is given back.
    assert load_job(database, job_id).attempts == 1


def test_release_never_passes_a_job_through_a_finished_state(database: Database) -> None:
    job_id = add_job(database)
    claim(database, "w1")
    with database.session() as session:
        session.execute(update(Job).where(Job.id == job_id).values(status="cancelled"))
    with database.session() as session:
        assert not release(session, job_id, "w1"), "a cancelled job must stay cancelled"
    assert load_job(database, job_id).status == "cancelled"


def claim_for(db: Database, worker_id: str, device_class: str) -> int | None:
    with db.session(immediate=True) as session:
        job = claim_next(session, worker_id, POLICY, device_class=device_class)
        return None if job is None else job.id


def test_a_job_is_claimed_only_by_a_worker_of_its_device_class(database: Database) -> None:
    h100, a10 = "cuda: NVIDIA H100 80GB HBM3", "cuda: NVIDIA A10"
    for_h100 = add_job(database, device_class=h100)
    unclassed = add_job(database)
    assert claim_for(database, "a10-worker", a10) == unclassed
    assert load_job(database, unclassed).device_class == a10, "its first worker stamps it"
    assert claim_for(database, "a10-worker", a10) is None
    assert claim(database, "classless-worker") is None
    assert claim_for(database, "h100-worker", h100) == for_h100


def test_a_job_taken_over_stays_on_its_device_class(database: Database) -> None:
    h100, a10 = "cuda: NVIDIA H100 80GB HBM3", "cuda: NVIDIA A10"
    job_id = add_job(database)
    assert claim_for(database, "h100-1", h100) == job_id
    with database.session() as session:  # its worker died a minute ago
        session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(heartbeat_at=utcnow() - timedelta(seconds=60))
        )
    assert claim_for(database, "a10", a10) is None
    assert claim_for(database, "h100-2", h100) == job_id


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_leases_use_the_database_clock_not_the_workers(database: Database) -> None:
    """Hosts' clocks drift: a worker an hour late must not write heartbeats that look stale,
    and one an hour early must not see a fresh lease as stale; both read the server's now()."""
    job_id = add_job(database)
    with time_machine.travel(utcnow() - timedelta(hours=1), tick=True):
        assert claim(database, "late-clock") == job_id
        with database.session() as session:
            assert heartbeat(session, job_id, "late-clock") is False
    with database.session() as session:
        server_now = session.scalar(select(func.now()))
        beat = session.get(Job, job_id).heartbeat_at
    assert beat is not None and abs((server_now - beat).total_seconds()) < 5
    with time_machine.travel(utcnow() + timedelta(hours=1), tick=True):
        assert claim(database, "early-clock") is None
    assert load_job(database, job_id).worker_id == "late-clock"
