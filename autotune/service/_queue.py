"""The job queue in the database: claim, heartbeat, release, cancel.

Every function takes a :class:`~sqlalchemy.orm.Session` and never commits: the caller owns
the transaction. Claims must run in ``Database.session(immediate=True)`` so that on SQLite the
write lock is taken before the read; on PostgreSQL the candidate rows are locked with
``SELECT ... FOR UPDATE SKIP LOCKED`` so that many workers on many hosts never claim one job
twice and never wait on each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, case, func, or_, select, true, update
from sqlalchemy.orm import Session

from autotune.errors import JobNotFoundError, JobStateError
from autotune.store import Job, database_now

#: A job in one of these states will not change any more.
FINISHED_STATUSES = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class ClaimPolicy:
    """When a running job counts as abandoned, and how often it may be taken over."""

    #: A running job whose heartbeat is older than this has lost its worker.
    stale_after_s: float = 30.0
    #: Attempts (claims) after which an abandoned job is failed instead of taken over again.
    max_attempts: int = 3


def claim_next(
    session: Session,
    worker_id: str,
    policy: ClaimPolicy,
    now: datetime | None = None,
    device_class: str | None = None,
    max_ranks: int | None = None,
) -> Job | None:
    """Claim the oldest queued job, or a running one whose worker stopped heartbeating.

    The claimed job is marked running, owned by ``worker_id``, heartbeated now (on the
    database's clock) and its ``attempts`` counted. Abandoned jobs that used up their attempts
    are failed on the way. Jobs that are running without a heartbeat (a CLI ``autotune run``
    in its own process) are never taken. A worker declaring its ``device_class`` only takes
    jobs of that class or of none yet, and stamps its class on the latter; one declaring
    ``max_ranks`` (the devices it owns) only takes jobs of at most that many ranks
    (``nproc_per_node``), so that a job of N ranks waits for a worker owning N devices.
    """
    now = now or database_now(session)
    abandoned = and_(
        Job.status == "running",
        Job.heartbeat_at.is_not(None),
        Job.heartbeat_at < now - timedelta(seconds=policy.stale_after_s),
    )
    candidates = (
        select(Job)
        .where(or_(Job.status == "queued", abandoned))
        .where(
            or_(Job.device_class.is_(None), Job.device_class == device_class)
            if device_class is not None
            else Job.device_class.is_(None)
        )
        .where(
            func.coalesce(Job.options["nproc_per_node"].as_integer(), 1) <= max_ranks
            if max_ranks is not None
            else true()
        )
        .order_by(Job.id)
        .limit(1)
        .with_for_update(skip_locked=True)
    )
    while (job := session.scalars(candidates).first()) is not None:
        if job.status == "running" and job.cancel_requested:
            _finish(job, "cancelled", now)
        elif job.status == "running" and job.attempts >= policy.max_attempts:
            _finish(
                job,
                "failed",
                now,
                error=(
                    f"job {job.id} lost its worker {job.attempts} times (last: {job.worker_id}); "
                    "check the worker logs for what kills it, then submit the job again"
                ),
            )
        else:
            job.status = "running"
            job.worker_id = worker_id
            job.heartbeat_at = now
            job.attempts = (job.attempts or 0) + 1
            job.started_at = job.started_at or now
            job.device_class = job.device_class or device_class
            session.flush()
            return job
        session.flush()
    return None


def heartbeat(session: Session, job_id: int, worker_id: str) -> bool | None:
    """Refresh the lease of ``worker_id`` on a running job.

    Returns whether a cancel was requested, or None when the job is no longer this worker's
    (finished, or taken over after a missed heartbeat): the worker must stop its trial.
    """
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.worker_id == worker_id, Job.status == "running")
        .values(heartbeat_at=database_now(session))
        .returning(Job.cancel_requested)
    ).first()
    return None if result is None else bool(result[0])


def release(session: Session, job_id: int, worker_id: str) -> bool:
    """Put a running job this worker stops for shutdown back in the queue, to resume elsewhere.

    The job goes straight from running to queued, and its attempt is given back: a shutdown
    is not a failure. A job that finished anyway, whose cancel was requested, or that another
    worker owns by now, is left alone.
    """
    result = session.execute(
        update(Job)
        .where(
            Job.id == job_id,
            Job.worker_id == worker_id,
            Job.status == "running",
            Job.cancel_requested.is_(False),
        )
        .values(
            status="queued",
            worker_id=None,
            heartbeat_at=None,
            finished_at=None,
            attempts=case((Job.attempts > 0, Job.attempts - 1), else_=0),
        )
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def fail(session: Session, job_id: int, worker_id: str, error: str) -> None:
    """Mark a job this worker owns failed, with a message for the user."""
    job = session.get(Job, job_id)
    if job is not None and job.worker_id == worker_id and job.status not in FINISHED_STATUSES:
        _finish(job, "failed", database_now(session), error=error)


def request_cancel(session: Session, job_id: int) -> Job:
    """Cancel a job: a queued one at once, a running one by asking its worker.

    Raises:
        JobNotFoundError: the job does not exist.
        JobStateError: it already succeeded or failed.
    """
    job = get_job(session, job_id)
    if job.status in ("succeeded", "failed"):
        raise JobStateError(
            f"job {job_id} already {job.status} and cannot be cancelled; "
            "submit a new job to run it again"
        )
    if job.status == "cancelled":
        return job
    job.cancel_requested = True
    if job.status != "running":
        _finish(job, "cancelled", database_now(session))
    session.flush()
    return job


def count_queued(session: Session) -> int:
    """How many jobs wait in the queue (status ``queued``): what a queue cap is checked against."""
    return session.scalar(select(func.count()).select_from(Job).where(Job.status == "queued")) or 0


def get_job(session: Session, job_id: int) -> Job:
    """The job with id ``job_id``; raises :class:`JobNotFoundError` when there is none."""
    job = session.get(Job, job_id)
    if job is None:
        raise JobNotFoundError(f"job {job_id} does not exist; list the jobs to find its id")
    return job


def _finish(job: Job, status: str, now: datetime, error: str | None = None) -> None:
    job.status = status
    job.finished_at = now
    job.heartbeat_at = None
    if error is not None:
        job.error = error
