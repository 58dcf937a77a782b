"""Opening the database: SQLite by default (WAL, busy timeout), PostgreSQL for shared workers."""

from __future__ import annotations

import gc
import os
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from autotune.errors import StoreError
from autotune.store._migrate import ensure_current, upgrade

DEFAULT_DB_FILE = "autotune.db"
ENV_VAR = "AUTOTUNE_DB"
BUSY_TIMEOUT_MS = 30_000


def resolve_url(db: str | None) -> str:
    """The database URL from ``--db``, else ``$AUTOTUNE_DB``, else ``./autotune.db``.

    A plain path is taken as a SQLite file.
    """
    value = db or os.environ.get(ENV_VAR) or DEFAULT_DB_FILE
    if "://" in value:
        return value
    return f"sqlite:///{Path(value).expanduser().resolve()}"


def configure_sqlite(engine: Engine, always_immediate: bool = False) -> None:
    """WAL, a busy timeout, foreign keys, and transactions that can take the write lock first.

    pysqlite's own transaction handling defers BEGIN, so a transaction that reads and then
    writes fails at once with "database is locked" when another connection committed in
    between (the busy timeout does not apply to that case). Taking over BEGIN lets writers use
    BEGIN IMMEDIATE: ``session(immediate=True)``, or every transaction with
    ``always_immediate`` (for engines we do not drive ourselves, such as Optuna's).
    """

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        immediate = always_immediate or connection.get_execution_options().get(
            "sqlite_immediate", False
        )
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def release_interrupted(exc: BaseException) -> None:
    """Free what a database call stopped by ``exc`` (Ctrl-C, a kill) still holds.

    A KeyboardInterrupt raised while SQLite steps a statement leaves that statement unfinished,
    referenced from the frames of the traceback. SQLAlchemy closes the connection, but SQLite
    keeps a connection with unfinished statements open, with its transaction and write lock,
    until they are freed: any write before that (the job's "interrupted" status) waits out the
    busy timeout and fails. Clearing the finished frames' locals frees the statement.
    """
    traceback.clear_frames(exc.__traceback__)
    gc.collect()


def _hide_password(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        scheme, _, rest = url.partition("://")
        userinfo, at, location = rest.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        return f"{scheme}://{user}:***@{location}" if at and colon else url


class Database:
    """An engine and its sessions; the caller of :meth:`session` owns the transaction."""

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self.engine = create_engine(url, pool_pre_ping=True, **self._engine_options(url))
        except (ArgumentError, ImportError, ValueError) as exc:
            raise StoreError(
                f"cannot open database {_hide_password(url)!r}: {exc}; pass --db as a file path, "
                "sqlite:///FILE or postgresql://USER@HOST/DB"
            ) from None
        if self.is_sqlite:
            configure_sqlite(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._immediate_sessions = sessionmaker(
            self.engine.execution_options(sqlite_immediate=True), expire_on_commit=False
        )

    @staticmethod
    def _engine_options(url: str) -> dict[str, Any]:
        if url.startswith("sqlite"):
            return {"connect_args": {"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False}}
        return {"pool_size": 5, "max_overflow": 5}

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @property
    def shown_url(self) -> str:
        """The URL with its password hidden: the only form to print or log."""
        return self.engine.url.render_as_string(hide_password=True)

    def create_schema(self) -> None:
        """Create a new database's tables; refuse one whose schema needs ``autotune db upgrade``."""
        with self._unreachable_is_store_error():
            ensure_current(self.engine, self.shown_url)

    def upgrade_schema(self) -> tuple[str | None, str]:
        """Migrate the schema to this autotune's: (revision before, revision after)."""
        with self._unreachable_is_store_error():
            return upgrade(self.engine)

    @contextmanager
    def _unreachable_is_store_error(self) -> Iterator[None]:
        try:
            yield
        except OperationalError as exc:
            raise StoreError(
                f"cannot open database {self.shown_url!r}: {exc.orig}; check the path or "
                "server and that it is writable"
            ) from None

    @contextmanager
    def session(self, immediate: bool = False) -> Iterator[Session]:
        """A session in one transaction, committed on success and rolled back on error.

        ``immediate`` takes the write lock at the start on SQLite (for atomic claims);
        PostgreSQL callers lock rows with ``FOR UPDATE SKIP LOCKED`` instead.
        """
        factory = self._immediate_sessions if immediate else self._sessions
        with factory() as session, session.begin():
            yield session

    def dispose(self) -> None:
        self.engine.dispose()


def open_database(db: str | None = None) -> Database:
    """Open (creating if needed) the database named by ``--db``/``$AUTOTUNE_DB``/default."""
    database = Database(resolve_url(db))
    database.create_schema()
    return database
