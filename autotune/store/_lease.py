"""Writing to a job only while owning it, on the database's clock.

Leases compare timestamps, so they must all come from one clock: the database server's
(``now()`` on PostgreSQL). SQLite lives on one host, whose clock every writer shares.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from autotune.errors import JobNotFoundError, LeaseLostError
from autotune.store._models import Job, Trial, utcnow


def database_now(session: Session) -> datetime:
    """The current time on the database's clock, as an aware UTC datetime."""
    if session.get_bind().dialect.name == "sqlite":
        return utcnow()
    now = session.scalar(select(func.now()))
    assert isinstance(now, datetime)
    return now


def lock_owned_job(session: Session, job_id: int, owner: str | None) -> Job:
    """Lock job ``job_id`` for this transaction, checking that ``owner`` still holds it.

    With ``owner`` None (a CLI run, which owns its job by creating it) only the lock is taken.
    The row lock (SQLite: the write lock of ``session(immediate=True)``) makes the check and
    the writes that follow one step, so a worker that lost its lease cannot write after the
    new owner took the job.

    Raises:
        LeaseLostError: another worker owns the job now, or it is no longer running.
    """
    job = session.scalars(select(Job).where(Job.id == job_id).with_for_update()).first()
    if job is None:
        raise JobNotFoundError(f"job {job_id} does not exist; list the jobs to find its id")
    if owner is not None and (job.worker_id != owner or job.status != "running"):
        raise LeaseLostError(
            f"job {job_id} is no longer owned by {owner} (now {job.status}, worker "
            f"{job.worker_id or 'none'}); this worker stops it without storing more trials"
        )
    return job


def next_trial_number(session: Session, job_id: int) -> int:
    """The number of the job's next trial; call it after :func:`lock_owned_job`."""
    current = session.scalar(select(func.max(Trial.number)).where(Trial.job_id == job_id))
    return (current or 0) + 1
