"""/v1/jobs: submit, list, inspect and cancel tuning jobs; read their trials and result."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from autotune import service
from autotune.errors import WorkloadError
from autotune.predict import public_profile
from autotune.recommend import RecommendationDocument
from autotune.service import WorkloadCatalog
from autotune.store import Database, Job
from autotune.tuner import TuneOptions, create_job, remembered_answer

from ..auth import require_may_cancel
from ..deps import (
    CallerDep,
    CatalogDep,
    DatabaseDep,
    SessionDep,
    SettingsDep,
    SubmitterDep,
    WriteSessionDep,
    require_submitter,
)
from ..limits import SlidingWindowLimit
from ..schemas import (
    ErrorPublic,
    JobCreate,
    JobDetailPublic,
    JobPublic,
    JobsPublic,
    JobStatus,
    TrialPublic,
    TrialsPublic,
)
from ..settings import Settings

router = APIRouter(prefix="/jobs", tags=["jobs"])

#: Ids are 32-bit on PostgreSQL; larger numbers cannot name a job.
JobId = Annotated[int, Path(ge=1, le=2**31 - 1, description="The job's id.")]
Offset = Annotated[int, Query(ge=0, le=2**31 - 1, description="Items to skip.")]
Limit = Annotated[int, Query(ge=1, le=100, description="Items per page.")]

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorPublic, "description": "No job has this id."},
}
FORBIDDEN: dict[int | str, dict[str, Any]] = {
    403: {
        "model": ErrorPublic,
        "description": "The token's role does not allow it, or another site's page sent it.",
    },
}

#: Seconds a client is asked to wait when the queue is full: workers take jobs in about this.
QUEUE_FULL_RETRY_AFTER_S = 60


def job_public(
    job: Job, progress: service.Progress, catalog: WorkloadCatalog, live: dict[str, int]
) -> JobPublic:
    """The job as the API shows it; ``live``: the device classes of the live workers."""
    return JobPublic.model_validate(
        {
            **{name: getattr(job, name) for name in JobPublic.model_fields if hasattr(job, name)},
            "workload": catalog.name_of(job.workload),
            "options": {**job.options, "workload": catalog.name_of(job.workload)},
            "progress": progress,
            "recommendation_ready": job.recommendation is not None,
            "waiting_for": service.waiting_for(job, live),
        },
        from_attributes=True,
    )


def job_detail(
    job: Job, progress: service.Progress, catalog: WorkloadCatalog, live: dict[str, int]
) -> JobDetailPublic:
    """One job, as the single-job answers show it: also its profile."""
    public = job_public(job, progress, catalog, live)
    return JobDetailPublic(**public.model_dump(), profile=public_profile(job.profile))


def _live(session: Session, settings: Settings) -> dict[str, int]:
    return service.live_device_classes(session, settings.heartbeat_timeout_s)


def invalid_field(field: str, message: str, value: Any) -> RequestValidationError:
    """A 422 about one field of the body, in the shape FastAPI gives its own."""
    return RequestValidationError(
        [{"type": "value_error", "loc": ("body", field), "msg": message, "input": value}]
    )


async def within_submission_rate(request: Request) -> None:
    """Refuse a client's submission past ``submissions_per_minute`` (429 with ``Retry-After``)."""
    rate: SlidingWindowLimit = request.app.state.submission_rate
    wait_s = rate.admit(request.client.host if request.client else "")
    if wait_s is not None:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"this client made {rate.limit} submissions within a minute, the server's limit "
            f"(AUTOTUNE_SUBMISSIONS_PER_MINUTE); retry in {wait_s} s",
            headers={"Retry-After": str(wait_s)},
        )


def within_job_limits(body: JobCreate, settings: Settings) -> dict[str, Any]:
    """The server's caps on a submission: its trial count and time budget, whose default is
    filled in where the body names none, so that no job holds a worker unbounded."""
    if body.n_trials > settings.max_trials:
        raise invalid_field(
            "n_trials",
            f"n_trials {body.n_trials} is more than this server's maximum of "
            f"{settings.max_trials}; ask for fewer trials",
            body.n_trials,
        )
    if body.time_budget_s is None:
        return {"time_budget_s": settings.default_time_budget_s}
    if body.time_budget_s > settings.max_time_budget_s:
        raise invalid_field(
            "time_budget_s",
            f"time_budget_s {body.time_budget_s:g} is more than this server's maximum of "
            f"{settings.max_time_budget_s:g} s; ask for a shorter budget",
            body.time_budget_s,
        )
    return {}


def refuse_if_queue_full(database: Database, settings: Settings) -> None:
    """429 while ``max_queued_jobs`` jobs wait: the queued ones are kept, none is dropped."""
    with database.session() as session:
        queued = service.count_queued(session)
    if queued >= settings.max_queued_jobs:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"the queue is full ({queued} jobs wait, the server's limit is "
            f"{settings.max_queued_jobs}); retry in {QUEUE_FULL_RETRY_AFTER_S} s, once workers "
            "have taken some",
            headers={"Retry-After": str(QUEUE_FULL_RETRY_AFTER_S)},
        )


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobDetailPublic,
    responses={
        200: {
            "model": JobDetailPublic,
            "description": "A succeeded job already answered the same question; it is the "
            "answer (the body does not say ``fresh``).",
        },
        400: {"model": ErrorPublic, "description": "The body is not UTF-8 text."},
        413: {"model": ErrorPublic, "description": "The body is larger than the server allows."},
        **FORBIDDEN,
        429: {
            "model": ErrorPublic,
            "description": "The queue is full, or this client submitted too often; the "
            "``Retry-After`` header says when to try again.",
        },
    },
    dependencies=[Depends(require_submitter), Depends(within_submission_rate)],
)
def submit_job(
    body: JobCreate,
    response: Response,
    database: DatabaseDep,
    catalog: CatalogDep,
    settings: SettingsDep,
    caller: SubmitterDep,
) -> JobDetailPublic:
    """Queue a tuning job; a worker picks it up. Poll the ``Location`` for its progress.

    A succeeded job that answered the same question (the workload's source, the options that
    shape the answer, the device class and software) is answered instead, with status 200 and
    its ``Location``, unless the body says ``"fresh": true``. Without a ``device_class``, the
    device is the one this server's host would run it on. The server caps the trial count and
    the time budget (filling in its default budget) and the number of queued jobs."""
    try:
        entry = catalog.resolve(body.workload)
    except WorkloadError as exc:
        raise invalid_field("workload", str(exc), body.workload) from None
    options = TuneOptions.model_validate(
        {
            **body.model_dump(exclude={"fresh"}),
            **within_job_limits(body, settings),
            "workload": entry.ref,
        }
    )
    earlier = None if body.fresh else remembered_answer(database, options)
    if earlier is not None:
        response.status_code = status.HTTP_200_OK
        job_id = earlier.id
    else:
        refuse_if_queue_full(database, settings)
        job_id = create_job(database, options, submitted_by=caller.name)
    response.headers["Location"] = f"/v1/jobs/{job_id}"
    with database.session() as session:
        job = service.get_job(session, job_id)
        return job_detail(
            job, service.progress(session, [job])[job_id], catalog, _live(session, settings)
        )


@router.get("", response_model=JobsPublic)
def list_jobs(
    session: SessionDep,
    catalog: CatalogDep,
    settings: SettingsDep,
    status_: Annotated[JobStatus | None, Query(alias="status")] = None,
    offset: Offset = 0,
    limit: Limit = 50,
) -> JobsPublic:
    """Jobs, newest first; ``status`` keeps only jobs in that state."""
    page = service.list_jobs(session, status_, offset, limit)
    progress = service.progress(session, page.items)
    live = _live(session, settings)
    return JobsPublic(
        data=[job_public(job, progress[job.id], catalog, live) for job in page.items],
        count=page.count,
    )


@router.get("/{job_id}", response_model=JobDetailPublic, responses=NOT_FOUND)
def read_job(
    job_id: JobId, session: SessionDep, catalog: CatalogDep, settings: SettingsDep
) -> JobDetailPublic:
    """Status, progress (trials done of the budget, best so far), timestamps and error; for a
    queued job no live worker can take, ``waiting_for`` says why; the profile once measured."""
    job = service.get_job(session, job_id)
    return job_detail(
        job, service.progress(session, [job])[job_id], catalog, _live(session, settings)
    )


@router.get("/{job_id}/trials", response_model=TrialsPublic, responses=NOT_FOUND)
def read_trials(
    job_id: JobId, session: SessionDep, offset: Offset = 0, limit: Limit = 50
) -> TrialsPublic:
    """Every measured trial of the job, in the order they ran, with all stored fields; trials
    of an earlier ``measurement_set`` than the job's ran on other hardware and are not ranked."""
    page = service.list_trials(session, job_id, offset, limit)
    return TrialsPublic(
        data=[TrialPublic.model_validate(trial) for trial in page.items], count=page.count
    )


@router.get(
    "/{job_id}/recommendation",
    response_model=RecommendationDocument,
    responses={
        **NOT_FOUND,
        409: {"model": ErrorPublic, "description": "The job has no recommendation (yet)."},
    },
)
def read_recommendation(job_id: JobId, session: SessionDep) -> JSONResponse:
    """The recommendation JSON (as ``autotune run --out`` writes it) of a succeeded job.

    Answered as stored, key for key: the writer checked it against the model, and a document
    of an older version is not rewritten on the way out."""
    return JSONResponse(service.recommendation(session, job_id))


@router.post(
    "/{job_id}/cancel",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobDetailPublic,
    responses={
        **NOT_FOUND,
        **FORBIDDEN,
        409: {"model": ErrorPublic, "description": "The job already succeeded or failed."},
    },
)
def cancel_job(
    job_id: JobId,
    session: WriteSessionDep,
    catalog: CatalogDep,
    settings: SettingsDep,
    caller: CallerDep,
) -> JobDetailPublic:
    """Cancel a job: a queued one at once; a running one stops its trial within seconds. Only
    its submitter or an admin may."""
    require_may_cancel(caller, service.get_job(session, job_id))
    job = service.request_cancel(session, job_id)
    return job_detail(
        job, service.progress(session, [job])[job_id], catalog, _live(session, settings)
    )
