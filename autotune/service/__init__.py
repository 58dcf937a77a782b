"""The tuning service's engine room: the job queue, workers, the workload catalog, a client.

The REST API (the top-level ``api`` package) and the ``autotune serve|worker|submit|jobs``
commands are thin faces over these functions.
"""

from autotune.errors import JobNotFoundError, JobStateError, ServiceError
from autotune.service._catalog import ENTRY_POINT_GROUP, CatalogEntry, WorkloadCatalog
from autotune.service._client import ServiceClient
from autotune.service._fleet import announce, live_device_classes, retire, waiting_for
from autotune.service._queries import (
    BestTrial,
    MetricsSnapshot,
    Page,
    Progress,
    list_jobs,
    list_trials,
    metrics,
    progress,
    recommendation,
)
from autotune.service._queue import (
    FINISHED_STATUSES,
    ClaimPolicy,
    claim_next,
    count_queued,
    fail,
    get_job,
    heartbeat,
    release,
    request_cancel,
)
from autotune.service._worker import JobRunner, Worker

__all__ = [
    "ENTRY_POINT_GROUP",
    "FINISHED_STATUSES",
    "BestTrial",
    "CatalogEntry",
    "ClaimPolicy",
    "JobNotFoundError",
    "JobRunner",
    "JobStateError",
    "MetricsSnapshot",
    "Page",
    "Progress",
    "ServiceClient",
    "ServiceError",
    "Worker",
    "WorkloadCatalog",
    "announce",
    "claim_next",
    "count_queued",
    "fail",
    "get_job",
    "heartbeat",
    "list_jobs",
    "list_trials",
    "live_device_classes",
    "metrics",
    "progress",
    "recommendation",
    "release",
    "request_cancel",
    "retire",
    "waiting_for",
]
