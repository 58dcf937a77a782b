"""The workers alive now and the device classes they serve: what a job can be submitted for.

A worker announces itself while it runs (each poll of the queue and each heartbeat of its
job) and retires when it stops; one that stopped announcing is no longer counted. Like the
queue, every function takes a session and never commits.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from autotune.store import Job, LiveWorker, database_now

#: Rows of workers silent for this long are deleted when another worker announces itself.
_FORGET_AFTER = timedelta(hours=1)


def announce(session: Session, worker_id: str, device_class: str) -> None:
    """Record that ``worker_id``, serving ``device_class``, is alive now (database clock)."""
    now = database_now(session)
    worker = session.get(LiveWorker, worker_id)
    if worker is None:
        session.add(LiveWorker(id=worker_id, device_class=device_class, seen_at=now))
    else:
        worker.device_class, worker.seen_at = device_class, now
    session.execute(delete(LiveWorker).where(LiveWorker.seen_at < now - _FORGET_AFTER))


def retire(session: Session, worker_id: str) -> None:
    """Forget a worker that stops."""
    session.execute(delete(LiveWorker).where(LiveWorker.id == worker_id))


def live_device_classes(session: Session, stale_after_s: float) -> dict[str, int]:
    """Device classes of the workers heard from within ``stale_after_s``, with their counts."""
    since = database_now(session) - timedelta(seconds=stale_after_s)
    rows = session.execute(
        select(LiveWorker.device_class, func.count())
        .where(LiveWorker.seen_at >= since)
        .group_by(LiveWorker.device_class)
        .order_by(LiveWorker.device_class)
    )
    return {device_class: int(count) for device_class, count in rows}


def waiting_for(job: Job, live: dict[str, int]) -> str | None:
    """Why queued ``job`` cannot be claimed by any live worker (``live``: the live classes);
    None when a live worker can take it."""
    if job.status != "queued":
        return None
    if job.device_class is not None and job.device_class not in live:
        return (
            f"no live worker has device class {job.device_class!r}; start `autotune "
            "worker` on such a device, or submit the job again for a class that GET "
            "/v1/devices lists"
        )
    if not live:
        return (
            "no worker is running; start `autotune worker` (or `autotune serve` with its "
            "worker) on a device"
        )
    return None
