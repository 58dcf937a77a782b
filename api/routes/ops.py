"""/healthz and /metrics: for load balancers and Prometheus, outside /v1 and its token."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from sqlalchemy import text

from autotune import service
from autotune.store import JOB_STATUSES

from ..deps import SessionDep
from ..schemas import Health

router = APIRouter(tags=["operations"])

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


@router.get("/healthz", response_model=Health)
def health(session: SessionDep) -> Health:
    """``ok`` when the server is up and its database answers."""
    session.execute(text("SELECT 1"))
    return Health(status="ok")


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
