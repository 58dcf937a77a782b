"""Storage of jobs and trials through SQLAlchemy (SQLite by default, PostgreSQL shared)."""

from autotune.store._db import Database, configure_sqlite, open_database, resolve_url
from autotune.store._models import (
    JOB_STATUSES,
    OUTCOMES,
    PHASES,
    Base,
    Job,
    Outcome,
    Trial,
    utcnow,
)
from autotune.store._record import TrialRecord

__all__ = [
    "JOB_STATUSES",
    "OUTCOMES",
    "PHASES",
    "Base",
    "Database",
    "Job",
    "Outcome",
    "Trial",
    "TrialRecord",
    "configure_sqlite",
    "open_database",
    "resolve_url",
    "utcnow",
]
