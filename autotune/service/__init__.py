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
from autotune.service._tokens import (
    ROLES,
    ApiToken,
    Role,
    caller_of,
    check_token_name,
    hash_token,
    new_token,
    parse_tokens,
    read_tokens_file,
    token_line,
    token_weakness,
)
from autotune.service._worker import JobRunner, Worker

__all__ = [
    "ENTRY_POINT_GROUP",
    "FINISHED_STATUSES",
    "ROLES",
    "ApiToken",
    "BestTrial",
    "CatalogEntry",
    "ClaimPolicy",
    "JobNotFoundError",
    "JobRunner",
    "JobStateError",
    "MetricsSnapshot",
    "Page",
    "Progress",
    "Role",
    "ServiceClient",
    "ServiceError",
    "Worker",
    "WorkloadCatalog",
    "announce",
    "caller_of",
    "check_token_name",
    "claim_next",
    "count_queued",
    "fail",
    "get_job",
    "hash_token",
    "heartbeat",
    "list_jobs",
    "list_trials",
    "live_device_classes",
    "metrics",
    "new_token",
    "parse_tokens",
    "progress",
    "read_tokens_file",
    "recommendation",
    "release",
    "request_cancel",
    "retire",
    "token_line",
    "token_weakness",
    "waiting_for",
]
