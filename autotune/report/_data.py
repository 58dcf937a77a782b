"""What the job page shows, read from the store: the same shape the ``/v1`` API answers with."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from autotune import service
from autotune.predict import public_profile
from autotune.store import Trial, TrialRecord

#: Trials read per query; a page of this size keeps memory flat for long jobs.
_PAGE = 500


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _trial(trial: Trial) -> dict[str, Any]:
    """The trial as ``/v1/jobs/{id}/trials`` gives it: its record and its place in the job."""
    return {
        "number": trial.number,
        "phase": trial.phase,
        "interrupted": trial.interrupted,
        "measurement_set": trial.measurement_set,
        **TrialRecord.model_validate(trial).model_dump(mode="json"),
    }


def _trials(session: Session, job_id: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    while True:
        page = service.list_trials(session, job_id, len(rows), _PAGE)
        rows.extend(_trial(trial) for trial in page.items)
        if len(rows) >= page.count or not page.items:
            return rows


def job_page_data(session: Session, job_id: int) -> dict[str, Any]:
    """The job, its trials and its recommendation (None until it has one).

    The keys are those of ``/v1/jobs/{id}``, ``/v1/jobs/{id}/trials`` and
    ``/v1/jobs/{id}/recommendation``, so the page's script reads either source alike. Raises
    :class:`autotune.service.JobNotFoundError` when there is no such job.
    """
    job = service.get_job(session, job_id)
    progress = service.progress(session, [job])[job_id]
    return {
        "job": {
            "id": job.id,
            "workload": job.workload_name or job.workload,
            "workload_name": job.workload_name,
            "status": job.status,
            "options": job.options,
            "progress": {
                "trials_done": progress.trials_done,
                "trials_budget": progress.trials_budget,
                "confirm_done": progress.confirm_done,
                "best": None if progress.best is None else asdict(progress.best),
            },
            "recommendation_ready": job.recommendation is not None,
            "error": job.error,
            "device": job.device,
            "device_class": job.device_class,
            "measurement_set": job.measurement_set,
            "profile": public_profile(job.profile),
            **{
                name: _plain(getattr(job, name))
                for name in ("created_at", "started_at", "finished_at")
            },
        },
        "trials": _trials(session, job_id),
        "recommendation": job.recommendation,
    }
