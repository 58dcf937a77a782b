"""The job queue on SQLite and PostgreSQL: atomic claims, stale-heartbeat takeover, cancel."""

from __future__ import annotations

import threading
from datetime import timedelta

import conftest_service
import pytest
from conftest_service import add_job
from sqlalchemy import update

from autotune import service
from autotune.service import (
    ClaimPolicy,
    JobNotFoundError,
    JobStateError,
    claim_next,
    heartbeat,
    release,
    request_cancel,
)
from autotune.store import Database, Job, Trial, utcnow
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
        session.execute(update(Job).where(Job.id == job_id)
                        .values(heartbeat_at=utcnow() - timedelta(seconds=seconds)))


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
    job_id = add_job(database, status="running", attempts=3, worker_id="gone",
                     heartbeat_at=utcnow() - timedelta(minutes=5))
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
    assert load_job(database, job_id).attempts == 2


def test_progress_pages_metrics_and_recommendation_read_the_same_on_both(
    database: Database,
) -> None:
    job_id = add_job(database, status="running")
    rows = [("baseline", "ok", 100.0, False), ("search", "ok", 300.0, False),
            ("search", "crashed", None, True), ("search", "oom", None, False),
            ("confirm", "ok", 250.0, False)]
    with database.session() as session:
        for number, (phase, outcome, speed, interrupted) in enumerate(rows, start=1):
            session.add(Trial(job_id=job_id, number=number, phase=phase, outcome=outcome,
                              config={"batch_size": 8 * number}, config_key=str(number),
                              samples_per_s=speed, interrupted=interrupted, duration_s=2.0))
    with database.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        progress = service.progress(session, [job])[job_id]
        assert (progress.trials_done, progress.trials_budget, progress.confirm_done) == (3, 3, 1)
        assert progress.best is not None and (progress.best.number, progress.best.phase) == \
            (2, "search")
        page = service.list_trials(session, job_id, offset=1, limit=2)
        assert page.count == 5 and [t.number for t in page.items] == [2, 3]
        assert service.list_jobs(session, "running", 0, 10).count == 1
        snapshot = service.metrics(session)
        assert snapshot.trials_by_outcome == {"ok": 3, "crashed": 1, "oom": 1}
        assert (snapshot.duration_buckets[1.0], snapshot.duration_buckets[2.5]) == (0, 5)
        assert snapshot.duration_sum_s == 10.0
        with pytest.raises(JobStateError, match=f"job {job_id} is running and has no"):
            service.recommendation(session, job_id)
