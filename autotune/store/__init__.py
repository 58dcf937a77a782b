"""Storage of jobs and trials through SQLAlchemy (SQLite by default, PostgreSQL shared)."""

from autotune.store._db import (
    Database,
    configure_sqlite,
    open_database,
    release_interrupted,
    resolve_url,
)
from autotune.store._lease import database_now, lock_owned_job, next_trial_number
from autotune.store._lock import (
    LOCK_DIR_ENV,
    device_lock,
    device_locks,
    embedded_worker_slot,
    lock_dir,
    try_file_lock,
)
from autotune.store._migrate import head_revision, schema_differences, upgrade
from autotune.store._models import (
    JOB_STATUSES,
    OUTCOMES,
    PHASES,
    Base,
    Job,
    LiveWorker,
    Outcome,
    Trial,
    utcnow,
)
from autotune.store._record import TrialRecord, throughput_over_run

__all__ = [
    "JOB_STATUSES",
    "LOCK_DIR_ENV",
    "OUTCOMES",
    "PHASES",
    "Base",
    "Database",
    "Job",
    "LiveWorker",
    "Outcome",
    "Trial",
    "TrialRecord",
    "configure_sqlite",
    "database_now",
    "device_lock",
    "device_locks",
    "embedded_worker_slot",
    "head_revision",
    "lock_dir",
    "lock_owned_job",
    "next_trial_number",
    "open_database",
    "release_interrupted",
    "resolve_url",
    "schema_differences",
    "throughput_over_run",
    "try_file_lock",
    "upgrade",
    "utcnow",
]
