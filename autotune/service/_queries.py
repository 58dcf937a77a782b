"""Reading jobs, trials and their progress for the API and the CLI (the caller owns the session)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, and_, case, func, or_, select
from sqlalchemy.orm import Session

from autotune.errors import JobStateError
from autotune.service._queue import get_job
from autotune.store import Job, Trial

#: Phases that spend the job's trial budget; confirmation re-measures come on top.
BUDGET_PHASES = ("baseline", "checklist", "predicted", "search")
#: Upper bounds (seconds) of the trial duration histogram's buckets.
DURATION_BUCKETS_S = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)


@dataclass(frozen=True)
class BestTrial:
    number: int
    phase: str
    samples_per_s: float
    config: dict[str, Any]


@dataclass(frozen=True)
class Progress:
    """How far a job is: trials measured against its budget, and the best so far."""

    trials_done: int
    trials_budget: int
    confirm_done: int
    best: BestTrial | None


@dataclass(frozen=True)
class Page:
    items: Sequence[Any]
    count: int


@dataclass(frozen=True)
class MetricsSnapshot:
    jobs_by_status: dict[str, int]
    trials_by_outcome: dict[str, int]
    #: Cumulative counts per bucket bound, as Prometheus histograms want them.
    duration_buckets: dict[float, int]
    duration_count: int
    duration_sum_s: float


def _usable() -> Any:
    """SQL form of :attr:`autotune.store.TrialRecord.usable` (and not interrupted)."""
    return and_(
        Trial.outcome == "ok",
        Trial.interrupted.is_(False),
        Trial.pruned.is_(False),
        or_(Trial.losses_finite.is_(None), Trial.losses_finite.is_(True)),
        or_(Trial.within_budget.is_(None), Trial.within_budget.is_(True)),
        Trial.samples_per_s.is_not(None),
    )


def _page(session: Session, query: Select[Any], offset: int, limit: int) -> Page:
    count = session.scalar(select(func.count()).select_from(query.order_by(None).subquery()))
    items = session.scalars(query.offset(offset).limit(limit)).all()
    return Page(items=items, count=count or 0)


def list_jobs(session: Session, status: str | None, offset: int, limit: int) -> Page:
    """Jobs, newest first, optionally only those in ``status``."""
    query = select(Job).order_by(Job.id.desc())
    if status is not None:
        query = query.where(Job.status == status)
    return _page(session, query, offset, limit)


def list_trials(session: Session, job_id: int, offset: int, limit: int) -> Page:
    """The trials of a job in the order they were run; raises if the job does not exist."""
    get_job(session, job_id)
    query = select(Trial).where(Trial.job_id == job_id).order_by(Trial.number, Trial.id)
    return _page(session, query, offset, limit)


def progress(session: Session, jobs: Sequence[Job]) -> dict[int, Progress]:
    """The progress of each job in its current measurement set, in two queries whatever the
    number of jobs (trials of earlier sets ran on other hardware and count for nothing)."""
    ids = [job.id for job in jobs]
    counts: dict[tuple[int, bool], int] = {}
    in_budget = Trial.phase.in_(BUDGET_PHASES)
    current_set = and_(Job.id == Trial.job_id, Job.measurement_set == Trial.measurement_set)
    for job_id, budgeted, count in session.execute(
        select(Trial.job_id, in_budget, func.count())
        .join(Job, current_set)
        .where(Trial.job_id.in_(ids), Trial.interrupted.is_(False))
        .group_by(Trial.job_id, in_budget)
    ):
        counts[(job_id, bool(budgeted))] = count
    ranked = (
        select(
            Trial.job_id,
            Trial.number,
            Trial.phase,
            Trial.samples_per_s,
            Trial.config,
            func.row_number()
            .over(partition_by=Trial.job_id, order_by=(Trial.samples_per_s.desc(), Trial.number))
            .label("rank"),
        )
        .join(Job, current_set)
        .where(Trial.job_id.in_(ids), _usable())
        .subquery()
    )
    best = {
        row.job_id: BestTrial(row.number, row.phase, row.samples_per_s, row.config)
        for row in session.execute(select(ranked).where(ranked.c.rank == 1))
    }
    return {
        job.id: Progress(
            trials_done=counts.get((job.id, True), 0),
            trials_budget=int((job.options or {}).get("n_trials", 0)),
            confirm_done=counts.get((job.id, False), 0),
            best=best.get(job.id),
        )
        for job in jobs
    }


def recommendation(session: Session, job_id: int) -> dict[str, Any]:
    """The job's recommendation JSON; raises :class:`JobStateError` while it has none."""
    job = get_job(session, job_id)
    if job.recommendation is not None:
        return job.recommendation
    if job.status == "failed":
        reason = (job.error or "no reason was recorded").rstrip(".")
        raise JobStateError(
            f"job {job_id} failed without a recommendation ({reason}); fix "
            "the cause and submit the job again"
        )
    if job.status in ("cancelled", "interrupted"):
        raise JobStateError(
            f"job {job_id} was {job.status} before it had a recommendation; "
            "submit the job again to finish the search"
        )
    raise JobStateError(
        f"job {job_id} is {job.status} and has no recommendation yet; "
        "wait until its status is succeeded"
    )


def metrics(session: Session) -> MetricsSnapshot:
    """Counts for the Prometheus endpoint: jobs by status, trials by outcome and durations."""
    jobs = dict(session.execute(select(Job.status, func.count()).group_by(Job.status)).all())
    trials = dict(
        session.execute(select(Trial.outcome, func.count()).group_by(Trial.outcome)).all()
    )
    timed = Trial.duration_s.is_not(None)
    in_buckets = [
        func.sum(case((Trial.duration_s <= bound, 1), else_=0)) for bound in DURATION_BUCKETS_S
    ]
    count, total, *buckets = session.execute(
        select(func.count(), func.coalesce(func.sum(Trial.duration_s), 0.0), *in_buckets).where(
            timed
        )
    ).one()
    return MetricsSnapshot(
        jobs_by_status={str(k): int(v) for k, v in jobs.items()},
        trials_by_outcome={str(k): int(v) for k, v in trials.items()},
        duration_buckets={b: int(n or 0) for b, n in zip(DURATION_BUCKETS_S, buckets, strict=True)},
        duration_count=int(count),
        duration_sum_s=float(total),
    )
