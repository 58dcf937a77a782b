"""/healthz, /readyz and /metrics: for orchestrators, load balancers and Prometheus, outside
/v1 and its token."""

from __future__ import annotations

from anyio import to_thread
from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from sqlalchemy import text

from autotune import service
from autotune.store import JOB_STATUSES, Database

from ..deps import SessionDep
from ..schemas import Health

router = APIRouter(tags=["operations"])

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
#: The paths that answer without waiting for a database connection of the shared pool.
PROBES = ("/healthz", "/readyz")

_OK = Health(status="ok")


@router.get("/healthz", response_model=Health)
async def health() -> Health:
    """``ok`` while the server's event loop answers: liveness only.

    It touches no database and takes none of the threads the other endpoints queue for, so a
    busy server (every thread waiting on the database) or an unreachable database is not taken
    for a dead one: an orchestrator restarts on this probe, and a restart would fix neither.
    """
    return _OK


def _database_answers(database: Database) -> None:
    with database.session() as session:
        session.execute(text("SELECT 1"))


@router.get(
    "/readyz",
    response_model=Health,
    responses={503: {"description": "The database did not answer."}},
)
async def ready(request: Request) -> Health:
    """``ok`` when the server can serve jobs: its database answers (503 when it does not).

    The query runs on the readiness check's own thread (``app.state.readiness_thread``), not
    the pool the other endpoints share, so a busy server still answers it; and it holds at most
    one of the server's database connections.
    """
    database: Database = request.app.state.database
    limiter = request.app.state.readiness_thread
    await to_thread.run_sync(_database_answers, database, limiter=limiter)
    return _OK


def render_metrics(snapshot: service.MetricsSnapshot) -> str:
    """The Prometheus text exposition format (version 0.0.4)."""
    lines = [
        "# HELP autotune_jobs Jobs in the database by status.",
        "# TYPE autotune_jobs gauge",
        *(
            f'autotune_jobs{{status="{status}"}} {snapshot.jobs_by_status.get(status, 0)}'
            for status in JOB_STATUSES
        ),
        "# HELP autotune_trials_total Trials measured, by outcome.",
        "# TYPE autotune_trials_total counter",
        *(
            f'autotune_trials_total{{outcome="{outcome}"}} {count}'
            for outcome, count in sorted(snapshot.trials_by_outcome.items())
        ),
        "# HELP autotune_trial_duration_seconds Wall time of each trial process.",
        "# TYPE autotune_trial_duration_seconds histogram",
        *(
            f'autotune_trial_duration_seconds_bucket{{le="{bound:g}"}} {count}'
            for bound, count in snapshot.duration_buckets.items()
        ),
        f'autotune_trial_duration_seconds_bucket{{le="+Inf"}} {snapshot.duration_count}',
        f"autotune_trial_duration_seconds_sum {snapshot.duration_sum_s:.6g}",
        f"autotune_trial_duration_seconds_count {snapshot.duration_count}",
    ]
    return "\n".join(lines) + "\n"


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={200: {"content": {PROMETHEUS_TEXT: {}}}},
)
def prometheus_metrics(session: SessionDep) -> PlainTextResponse:
    """Jobs by status, trials by outcome and trial durations, in Prometheus text format."""
    body = render_metrics(service.metrics(session))
    return PlainTextResponse(body, media_type=PROMETHEUS_TEXT)
