"""Schema migrations (Alembic, shipped in the package): upgrade, check, refuse an old schema.

A brand-new empty database is created at the newest revision on first open, so that a new
user's first ``autotune run`` just works; a database with an older schema is refused with a
sentence naming ``autotune db upgrade``, which upgrades it (stamping databases created before
migrations existed at the first revision).
"""

from __future__ import annotations

from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

from autotune.errors import SchemaOutdatedError
from autotune.store._models import Base

SCRIPT_LOCATION = "autotune.store:migrations"
#: Our own version table, so that a user's Alembic table in the same database is left alone.
VERSION_TABLE = "autotune_alembic_version"
#: The revision that creates the schema as it was before migrations (``create_all``).
FIRST_REVISION = "0001"
#: Serializes concurrent upgrades on PostgreSQL (``pg_advisory_xact_lock``); any constant.
_UPGRADE_LOCK_KEY = 0x6175746F74756E65  # "autotune"


def include_autotune_tables(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """Only autotune's tables are ours to compare and migrate, never Optuna's."""
    if type_ == "table":
        return bool(name and name.startswith("autotune_") and name != VERSION_TABLE)
    return True


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision this autotune knows."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(connection: Connection) -> str | None:
    """The database's revision; None for an empty one or one from before migrations."""
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def _has_autotune_tables(connection: Connection) -> bool:
    return inspect(connection).has_table(Base.metadata.sorted_tables[0].name)


def _locked_transaction(engine: Engine) -> Any:
    """A transaction that no other upgrade runs alongside (SQLite: BEGIN IMMEDIATE)."""
    return engine.execution_options(sqlite_immediate=True).begin()


def upgrade(engine: Engine) -> tuple[str | None, str]:
    """Upgrade the database to the newest revision; (revision before, revision after)."""
    with _locked_transaction(engine) as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": _UPGRADE_LOCK_KEY}
            )
        before = current_revision(connection)
        if before is None and _has_autotune_tables(connection):
            command.stamp(_config(connection), FIRST_REVISION)
        command.upgrade(_config(connection), "head")
        return before, head_revision()


def ensure_current(engine: Engine, shown_url: str) -> None:
    """Create an empty database's schema; refuse one whose schema is not this autotune's.

    Raises:
        SchemaOutdatedError: the schema is older or newer than this version of autotune.
    """
    head = head_revision()
    with engine.connect() as connection:
        revision = current_revision(connection)
        fresh = revision is None and not _has_autotune_tables(connection)
    if revision == head:
        return
    if fresh:
        upgrade(engine)
        return
    known = {script.revision for script in ScriptDirectory.from_config(_config()).walk_revisions()}
    if revision is not None and revision not in known:
        raise SchemaOutdatedError(
            f"the database {shown_url} has schema revision {revision}, newer than this "
            f"autotune knows ({head}); upgrade autotune on this machine"
        )
    which = f"revision {revision}" if revision else "a schema from before migrations"
    raise SchemaOutdatedError(
        f"the database {shown_url} has {which}, this autotune needs revision {head}; back it "
        f"up, then run `autotune db upgrade --db {shown_url}`"
    )


def schema_differences(engine: Engine) -> list[Any]:
    """What the models declare that the migrated database lacks (empty when they agree)."""
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection,
            opts={
                "include_object": include_autotune_tables,
                "compare_type": True,
                "version_table": VERSION_TABLE,
            },
        )
        return list(compare_metadata(context, Base.metadata))
