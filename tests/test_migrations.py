"""Schema migrations on SQLite and PostgreSQL: old databases upgrade and keep their jobs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import conftest_service
import pytest
from conftest_service import AUTOTUNE, clean_env, free_port
from sqlalchemy import Engine, create_engine, inspect, select, text
from sqlalchemy.exc import IntegrityError

from autotune.errors import SchemaOutdatedError
from autotune.store import Database, Job, Trial, head_revision, open_database, schema_differences
from autotune.store._migrate import VERSION_TABLE, current_revision

database_url = conftest_service.database_url
SCHEMAS = Path(__file__).parent / "schemas"


def create_schema_of_main_before_migrations(engine: Engine) -> None:
    """The tables exactly as ``create_all`` made them at 56b5dca, from that commit's DDL."""
    ddl = (SCHEMAS / f"56b5dca_{engine.dialect.name}.sql").read_text()
    statements = [s.strip() for s in ddl.split(";\n") if s.strip().strip("-").strip()]
    with engine.begin() as connection:
        for statement in statements:
            lines = [line for line in statement.splitlines() if not line.startswith("--")]
            connection.exec_driver_sql("\n".join(lines))


def add_old_job(engine: Engine, workload: str, status: str) -> None:
    # SQLite gives CAST(... AS JSON) numeric affinity; PostgreSQL needs the cast from text.
    json = "CAST({} AS JSON)" if engine.dialect.name == "postgresql" else "{}"
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO autotune_jobs (workload, status, options, cancel_requested, attempts, "
                f"created_at) VALUES (:workload, :status, {json.format(':options')}, false, 1, "
                "CURRENT_TIMESTAMP)"
            ),
            {"workload": workload, "status": status, "options": '{"n_trials": 3}'},
        )
        job_id = connection.execute(text("SELECT max(id) FROM autotune_jobs")).scalar()
        for number in (1, 2):
            connection.execute(
                text(
                    "INSERT INTO autotune_trials (job_id, number, phase, config, config_key, "
                    "outcome, pruned, interrupted, samples_per_s, started_at) VALUES (:job, "
                    f":number, 'search', {json.format(':config')}, :key, 'ok', false, false, "
                    ":speed, CURRENT_TIMESTAMP)"
                ),
                {
                    "job": job_id,
                    "number": number,
                    "config": '{"batch_size": 32}',
                    "key": f"batch_size=3{number}",
                    "speed": 100.0 * number,
                },
            )


def run_autotune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AUTOTUNE, *args], capture_output=True, text=True, timeout=120, env=clean_env()
    )


@pytest.mark.slow
def test_a_database_from_before_migrations_is_refused_then_upgraded_with_its_jobs(
    database_url: str,
) -> None:
    engine = create_engine(database_url)
    create_schema_of_main_before_migrations(engine)
    add_old_job(engine, "builtin:image-cnn", "succeeded")
    add_old_job(engine, "builtin:text-lstm", "queued")

    with pytest.raises(SchemaOutdatedError, match=r"run `autotune db upgrade --db "):
        open_database(database_url)
    for command in (["worker"], ["serve", "--port", str(free_port())]):
        refused = run_autotune(*command, "--db", database_url)
        assert refused.returncode == 1
        assert "autotune db upgrade" in refused.stderr and "Traceback" not in refused.stderr

    upgraded = run_autotune("db", "upgrade", "--db", database_url)
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"from before migrations to revision {head_revision()}" in upgraded.stdout
    again = run_autotune("db", "upgrade", "--db", database_url)
    assert "is up to date" in again.stdout

    database = open_database(database_url)
    try:
        with database.session() as session:
            jobs = session.scalars(select(Job).order_by(Job.id)).all()
            assert [(j.workload, j.status, j.options) for j in jobs] == [
                ("builtin:image-cnn", "succeeded", {"n_trials": 3}),
                ("builtin:text-lstm", "queued", {"n_trials": 3}),
            ]
            assert [j.device_class for j in jobs] == [None, None]
            assert [t.samples_per_s for t in jobs[0].trials] == [100.0, 200.0]
        assert schema_differences(database.engine) == []
        with pytest.raises(IntegrityError), database.session() as session:
            session.add(Trial(job_id=jobs[0].id, number=2, config={}, config_key="x", outcome="ok"))
    finally:
        database.dispose()
        engine.dispose()


def test_the_models_and_the_migrations_agree(database_url: str) -> None:
    """A column added to a model without a migration fails here."""
    database = open_database(database_url)  # a new, empty database: migrated to the head
    try:
        with database.engine.connect() as connection:
            assert current_revision(connection) == head_revision()
        assert schema_differences(database.engine) == []
    finally:
        database.dispose()


def _shape(engine: Engine) -> dict[str, object]:
    inspector = inspect(engine)
    return {
        table: (
            [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)],
            sorted(
                (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                for i in inspector.get_indexes(table)
            ),
            [
                (f["constrained_columns"], f["referred_table"], f["options"].get("ondelete"))
                for f in inspector.get_foreign_keys(table)
            ],
        )
        for table in sorted(inspector.get_table_names())
        if table != VERSION_TABLE
    }


def test_the_first_revision_is_the_schema_of_main_before_migrations(
    database_url: str,
    tmp_path: Path,
) -> None:
    from alembic import command

    from autotune.store._migrate import _config

    old = create_engine(database_url)
    create_schema_of_main_before_migrations(old)
    expected = _shape(old)
    with old.begin() as connection:
        for table in ("autotune_trials", "autotune_jobs"):
            connection.execute(text(f"DROP TABLE {table}"))
    with old.begin() as connection:
        command.upgrade(_config(connection), "0001")
    assert _shape(old) == expected
    old.dispose()


def test_a_database_newer_than_this_autotune_is_refused(database_url: str) -> None:
    Database(database_url).dispose()
    open_database(database_url).dispose()
    engine = create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = 'f00dbeef'"))
    engine.dispose()
    with pytest.raises(SchemaOutdatedError, match="newer than this autotune knows"):
        open_database(database_url)
