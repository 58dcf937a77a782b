"""Storage of jobs and trials through SQLAlchemy (SQLite by default, PostgreSQL shared)."""

from autotune.store._db import Database, configure_sqlite, open_database, resolve_url
from autotune.store._models import JOB_STATUSES, OUTCOMES, PHASES, Base, Job, Trial, utcnow

__all__ = [
    "JOB_STATUSES",
    "OUTCOMES",
    "PHASES",
    "Base",
    "Database",
    "Job",
    "Trial",
    "configure_sqlite",
    "open_database",
    "resolve_url",
    "utcnow",
]
