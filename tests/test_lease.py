"""Trial rows are written only by the job's owner, numbered without gaps or repeats."""

from __future__ import annotations

import threading
from datetime import timedelta

import conftest_service
import pytest
from conftest_service import add_job
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from autotune.errors import LeaseLostError
from autotune.service import ClaimPolicy, claim_next
from autotune.store import Database, Job, Trial, lock_owned_job, next_trial_number, utcnow

database_url, database = conftest_service.database_url, conftest_service.database


def store_trial(db: Database, job_id: int, owner: str | None) -> int:
    """What the tuner does after each trial process: check the lease, number, insert."""
    with db.session(immediate=True) as session:
        lock_owned_job(session, job_id, owner)
        number = next_trial_number(session, job_id)
        session.add(
            Trial(job_id=job_id, number=number, config={}, config_key=f"k{number}", outcome="ok")
        )
        return number


def claim(db: Database, worker_id: str) -> None:
    with db.session(immediate=True) as session:
        assert claim_next(session, worker_id, ClaimPolicy(stale_after_s=30)) is not None


def trial_count(db: Database, job_id: int) -> int:
    with db.session() as session:
        return int(session.scalar(select(func.count()).where(Trial.job_id == job_id)) or 0)


def test_a_worker_that_lost_its_job_cannot_store_a_trial(database: Database) -> None:
    job_id = add_job(database)
    claim(database, "paused-worker")
    assert store_trial(database, job_id, "paused-worker") == 1
    with database.session() as session:  # its lease ran out while it was paused
        session.execute(
            update(Job).where(Job.id == job_id).values(heartbeat_at=utcnow() - timedelta(minutes=5))
        )
    claim(database, "new-owner")
    with pytest.raises(LeaseLostError, match="no longer owned by paused-worker"):
        store_trial(database, job_id, "paused-worker")
    assert trial_count(database, job_id) == 1
    assert store_trial(database, job_id, "new-owner") == 2


def test_a_cli_run_owns_its_job_without_a_lease(database: Database) -> None:
    job_id = add_job(database, status="running")
    assert [store_trial(database, job_id, None) for _ in range(2)] == [1, 2]


def test_concurrent_writers_never_share_a_trial_number(database: Database) -> None:
    job_id = add_job(database)
    numbers: list[int] = []
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for _ in range(5):
                numbers.append(store_trial(database, job_id, None))
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    writers = [threading.Thread(target=write) for _ in range(4)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
    assert errors == []
    assert sorted(numbers) == list(range(1, 21))


def test_the_database_refuses_a_repeated_trial_number(database: Database) -> None:
    job_id = add_job(database)
    store_trial(database, job_id, None)
    with pytest.raises(IntegrityError), database.session() as session:
        session.add(Trial(job_id=job_id, number=1, config={}, config_key="again", outcome="ok"))
