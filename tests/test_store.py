"""The store on SQLite (a real file) and PostgreSQL (one schema per test, dropped after)."""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, delete, func, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from autotune.errors import StoreError
from autotune.measure import WindowMetrics
from autotune.space import Config
from autotune.store import Database, Job, Trial, TrialRecord, open_database, resolve_url, utcnow
from autotune.tuner._record import trial_row

POSTGRES_URL = os.environ.get(
    "AUTOTUNE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
BIG = 5 * 2**32 + 7  # does not fit a 32-bit integer


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'autotune.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A URL whose connections use a fresh schema, dropped (with its tables) after the test."""
    try:
        admin = create_engine(POSTGRES_URL, connect_args={"connect_timeout": 3})
    except (SQLAlchemyError, ImportError) as exc:
        pytest.skip(f"cannot use PostgreSQL at {POSTGRES_URL}: {exc}")
    schema = f"autotune_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin.begin() as connection:
            connection.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    except SQLAlchemyError as exc:
        admin.dispose()
        pytest.skip(
            f"PostgreSQL server at {POSTGRES_URL} is unreachable or refused to create a schema "
            f"(set AUTOTUNE_TEST_POSTGRES_URL): {type(exc).__name__}: {exc}".splitlines()[0]
        )
    url = make_url(POSTGRES_URL).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as connection:
            connection.exec_driver_sql(f'DROP SCHEMA "{schema}" CASCADE')
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture
def opened() -> Iterator[Callable[[str], Database]]:
    """open_database, disposing every engine it made when the test ends."""
    databases: list[Database] = []

    def open_(url: str) -> Database:
        database = open_database(url)
        databases.append(database)
        return database

    yield open_
    for database in databases:
        database.dispose()


@pytest.fixture
def db(url: str, opened: Callable[[str], Database]) -> Database:
    return opened(url)


def make_job(**overrides: Any) -> Job:
    values: dict[str, Any] = {
        "workload": "builtin:image-cnn",
        "options": {"n_trials": 20, "fixed": {"amp": "bf16"}, "ranges": {}, "seed": None},
    }
    values.update(overrides)
    return Job(**values)


def make_trial(job: Job, number: int, **overrides: Any) -> Trial:
    values: dict[str, Any] = {
        "job": job,
        "number": number,
        "config": {"batch_size": 64, "num_workers": 2, "amp": "off"},
        "config_key": f"key-{number}",
        "outcome": "ok",
        "samples_per_s": 1000.0 + number,
    }
    values.update(overrides)
    return Trial(**values)


def count(db: Database, model: type[Job] | type[Trial]) -> int:
    with db.session() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


# -- both backends ---------------------------------------------------------------------------


def test_open_database_creates_the_tables(url: str, opened: Callable[[str], Database]) -> None:
    db = opened(url)
    inspector = inspect(db.engine)
    assert {"autotune_jobs", "autotune_trials"} <= set(inspector.get_table_names())
    indexes = {index["name"] for index in inspector.get_indexes("autotune_trials")}
    assert "ix_autotune_trials_job_key" in indexes
    assert db.is_sqlite == url.startswith("sqlite")
    # Opening again keeps what is there.
    with db.session() as session:
        session.add(make_job())
    assert count(opened(url), Job) == 1


@pytest.mark.postgres
def test_postgres_tables_live_in_the_test_schema(postgres_url: str) -> None:
    db = open_database(postgres_url)
    try:
        with db.session() as session:
            schema = session.scalar(text("SELECT current_schema()"))
            tables = set(
                session.scalars(
                    text(
                        "SELECT table_name FROM information_schema.tables WHERE table_schema = :s"
                    ),
                    {"s": schema},
                )
            )
        assert str(schema).startswith("autotune_test_")
        assert {"autotune_jobs", "autotune_trials"} <= tables
    finally:
        db.dispose()


def test_job_and_trial_round_trip(db: Database) -> None:
    started = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)
    finished = datetime(2024, 5, 1, 14, 31, tzinfo=timezone(timedelta(hours=2)))
    fingerprint = {"torch": "2.4.0", "cuda": None, "flags": [1, 2.5, "ü"], "nested": {"a": {}}}
    with db.session() as session:
        job = make_job(
            device={"type": "cpu", "memory_bytes": BIG}, fingerprint=fingerprint, started_at=started
        )
        make_trial(
            job,
            2,
            peak_memory_bytes=BIG,
            peak_host_memory_bytes=BIG + 1,
            peak_memory_allocated_bytes=2**40,
            peak_memory_reserved_bytes=2**31,
            fingerprint=fingerprint,
            started_at=started,
            finished_at=finished,
            within_budget=True,
            losses_finite=True,
            duration_s=1.5,
        )
        make_trial(job, 1, outcome="oom", samples_per_s=None, error="CUDA out of memory")
        session.add(job)
        session.flush()
        job_id = job.id

    with db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert job.options == {"n_trials": 20, "fixed": {"amp": "bf16"}, "ranges": {}, "seed": None}
        assert job.device == {"type": "cpu", "memory_bytes": BIG}
        assert job.fingerprint == fingerprint
        assert (job.status, job.attempts, job.cancel_requested) == ("queued", 0, False)
        assert job.recommendation is None
        assert [t.number for t in job.trials] == [1, 2]
        oom, ok = job.trials
        assert oom.outcome == "oom" and oom.error == "CUDA out of memory"
        assert oom.peak_memory_bytes is None
        assert ok.config == {"batch_size": 64, "num_workers": 2, "amp": "off"}
        assert ok.fingerprint == fingerprint
        assert ok.peak_memory_bytes == BIG
        assert ok.peak_host_memory_bytes == BIG + 1
        assert ok.peak_memory_allocated_bytes == 2**40
        assert ok.peak_memory_reserved_bytes == 2**31
        assert (ok.pruned, ok.interrupted) == (False, False)
        assert TrialRecord.model_validate(ok).usable
        assert not TrialRecord.model_validate(oom).usable
        for value, expected in [
            (job.started_at, started),
            (ok.started_at, started),
            (ok.finished_at, finished),
        ]:
            assert value is not None
            assert value.tzinfo is not None, f"{value!r} came back without a time zone"
            assert value == expected
        assert job.created_at.tzinfo is not None
        assert abs(job.created_at - utcnow()) < timedelta(minutes=5)


def test_deleting_a_job_deletes_its_trials(db: Database) -> None:
    with db.session() as session:
        job = make_job()
        make_trial(job, 1)
        make_trial(job, 2)
        session.add(job)
    assert count(db, Trial) == 2
    with db.session() as session:
        session.execute(delete(Job))
    assert count(db, Trial) == 0


def test_session_commits_on_success(db: Database) -> None:
    with db.session() as session:
        session.add(make_job(workload="kept"))
    with db.session() as session:
        assert list(session.scalars(select(Job.workload))) == ["kept"]


def test_session_rolls_back_on_exception(db: Database) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom), db.session() as session:
        job = make_job(workload="lost")
        make_trial(job, 1)
        session.add(job)
        session.flush()
        assert session.scalar(select(func.count()).select_from(Job)) == 1
        raise Boom
    assert count(db, Job) == 0
    assert count(db, Trial) == 0
    # The database is still usable afterwards.
    with db.session() as session:
        session.add(make_job())
    assert count(db, Job) == 1


# -- SQLite only -----------------------------------------------------------------------------


def test_sqlite_uses_wal_and_a_busy_timeout(
    sqlite_url: str, opened: Callable[[str], Database]
) -> None:
    db = opened(sqlite_url)
    with db.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert int(connection.exec_driver_sql("PRAGMA busy_timeout").scalar() or 0) >= 1000
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    path = make_url(sqlite_url).database
    assert path is not None
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def _try_write(path: str) -> str | None:
    """Write from another connection with a 0.1 s timeout; the error, or None if it wrote."""
    other = sqlite3.connect(path, timeout=0.1, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute(
            "INSERT INTO autotune_jobs (workload, status, options, cancel_requested, "
            "attempts, created_at) VALUES ('other', 'queued', '{}', 0, 0, "
            "'2024-01-01 00:00:00')"
        )
        other.execute("COMMIT")
        return None
    except sqlite3.OperationalError as exc:
        return str(exc)
    finally:
        other.close()


def test_sqlite_immediate_session_takes_the_write_lock(
    sqlite_url: str, opened: Callable[[str], Database]
) -> None:
    db = opened(sqlite_url)
    path = make_url(sqlite_url).database
    assert path is not None

    # A plain session that has only read does not hold the write lock (WAL readers don't block).
    with db.session() as session:
        session.execute(select(Job.id)).all()
        assert _try_write(path) is None

    with db.session(immediate=True) as session:
        session.execute(select(Job.id)).all()
        error = _try_write(path)
        assert error is not None and "locked" in error
        session.add(make_job(workload="claimer"))
    assert _try_write(path) is None
    with db.session() as session:
        assert sorted(session.scalars(select(Job.workload))) == ["claimer", "other", "other"]


# -- URLs ------------------------------------------------------------------------------------


def test_plain_path_is_a_sqlite_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AUTOTUNE_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    assert resolve_url("jobs.db") == f"sqlite:///{tmp_path.resolve() / 'jobs.db'}"
    assert resolve_url(None) == f"sqlite:///{tmp_path.resolve() / 'autotune.db'}"
    assert resolve_url(str(tmp_path / "sub" / ".." / "x.db")) == (
        f"sqlite:///{tmp_path.resolve() / 'x.db'}"
    )
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_url("~/home.db") == f"sqlite:///{tmp_path.resolve() / 'home.db'}"


def test_autotune_db_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "env.db"))
    assert resolve_url(None) == f"sqlite:///{tmp_path.resolve() / 'env.db'}"
    assert resolve_url("") == f"sqlite:///{tmp_path.resolve() / 'env.db'}"
    assert resolve_url(str(tmp_path / "flag.db")) == f"sqlite:///{tmp_path.resolve() / 'flag.db'}"
    monkeypatch.setenv("AUTOTUNE_DB", "postgresql+psycopg://u@db.example/autotune")
    assert resolve_url(None) == "postgresql+psycopg://u@db.example/autotune"


def test_open_database_uses_the_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "env.db"))
    db = open_database()
    try:
        assert db.is_sqlite
        assert (tmp_path / "env.db").exists()
    finally:
        db.dispose()


@pytest.mark.parametrize(
    "explicit",
    [
        "sqlite:////tmp/somewhere/else.db",
        "sqlite://",
        "postgresql+psycopg://user:secret@db.example:5433/autotune?sslmode=require",
    ],
)
def test_explicit_url_is_kept(explicit: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOTUNE_DB", "/ignored.db")
    assert resolve_url(explicit) == explicit


@pytest.mark.parametrize(
    "bad",
    [
        "nosuchdialect://host/db",
        "postgresql+nosuchdriver://u@h/db",
        "postgresql://user@host:notaport/db",
        "sqlite:////nonexistent-autotune-dir/sub/x.db",
        "postgresql+psycopg://postgres@127.0.0.1:1/test?connect_timeout=2",
    ],
)
def test_bad_url_is_a_store_error(bad: str) -> None:
    with pytest.raises(StoreError) as info:
        open_database(bad)
    message = str(info.value)
    assert message.startswith(f"cannot open database {bad!r}")
    assert "Traceback" not in message


# -- TrialRecord: the one record of a trial ------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "usable"),
    [
        ({}, True),
        ({"losses_finite": True, "within_budget": True}, True),
        ({"losses_finite": None, "within_budget": None}, True),
        ({"outcome": "oom"}, False),
        ({"outcome": "error"}, False),
        ({"outcome": "timeout"}, False),
        ({"outcome": "nonfinite"}, False),
        ({"outcome": "crashed"}, False),
        ({"pruned": True}, False),
        ({"losses_finite": False}, False),
        ({"within_budget": False}, False),
        ({"samples_per_s": None}, False),
    ],
)
def test_trial_usable(overrides: dict[str, Any], usable: bool) -> None:
    values: dict[str, Any] = {
        "outcome": "ok",
        "pruned": False,
        "losses_finite": True,
        "within_budget": True,
        "samples_per_s": 10.0,
    }
    values.update(overrides)
    assert TrialRecord(config=Config(), **values).usable is usable


def test_every_field_of_the_record_is_a_column_of_the_row() -> None:
    columns = set(inspect(Trial).columns.keys())
    fields = set(TrialRecord(config=Config(), outcome="ok").model_dump())  # computed ones too
    assert fields - {"config"} <= columns, "add a Trial column for each new TrialRecord field"


def test_every_metric_the_trial_process_measures_has_a_field() -> None:
    measured = set(WindowMetrics.__dataclass_fields__)
    assert measured <= set(TrialRecord.model_fields), (
        "add a TrialRecord field (and a Trial column) for each new WindowMetrics field"
    )


def test_record_round_trips_through_a_row(db: Database) -> None:
    record = TrialRecord(
        config=Config(batch_size=64, num_workers=2).normalized(),
        outcome="ok",
        within_budget=True,
        samples_per_s=812.5,
        step_time_median_ms=9.5,
        step_time_p90_ms=11.0,
        data_wait_fraction=0.25,
        steps=40,
        warmup_steps=3,
        window_s=2.0,
        losses_finite=True,
        peak_memory_allocated_bytes=BIG,
        peak_memory_reserved_bytes=BIG + 8,
        peak_host_memory_bytes=2**31,
        device_utilization=0.5,
        exit_code=0,
        fingerprint={"torch": "2.13.0"},
        finished_at=utcnow(),
        duration_s=3.25,
    )
    with db.session() as session:
        job = make_job()
        session.add(job)
        session.flush()
        session.add(trial_row(job.id, 1, "search", record, optuna_number=0))
        session.flush()
        job_id = job.id
    with db.session() as session:
        row = session.scalars(select(Trial).where(Trial.job_id == job_id)).one()
        assert row.peak_memory_bytes == BIG + 8
        assert row.config_key == record.config.key()
        assert TrialRecord.model_validate(row) == record
