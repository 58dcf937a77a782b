"""Alembic's environment: always run from :mod:`autotune.store._migrate` on a live connection."""

from __future__ import annotations

from alembic import context

from autotune.store._migrate import include_autotune_tables
from autotune.store._models import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    include_object=include_autotune_tables,
    version_table="autotune_alembic_version",
    # SQLite alters tables by copying them; PostgreSQL alters in place.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
