"""What a worker does not take on trust: a workload reference the database holds, its own
environment (passed to trials) and a lock directory others could write."""

from __future__ import annotations

import json
import os
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any

import conftest_service
import pytest
from conftest_service import start_autotune, wait_for
from sqlalchemy import func, select, text

from autotune.errors import ConfigError
from autotune.runner import TrialLauncher, probe_workload, trial_environment, withhold_from_trials
from autotune.service import Worker
from autotune.store import (
    LOCK_DIR_ENV,
    Database,
    Trial,
    lock_dir,
    open_database,
    try_file_lock,
)
from autotune.tuner import TuneOptions, create_job, load_job

database_url, database = conftest_service.database_url, conftest_service.database

TESTS = Path(__file__).parent
REFUSED = "is not in this worker's catalog, so it was not run"


def planted_workload(directory: Path) -> tuple[Path, Path]:
    """A workload file outside every catalog that leaves a marker file when it is imported."""
    marker = directory / "imported.marker"
    planted = directory / "planted" / "evil.py"
    planted.parent.mkdir()
    planted.write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        "from tiny import workload  # noqa: F401\n"
    )
    (planted.parent / "tiny.py").write_text((TESTS / "workloads" / "tiny.py").read_text())
    return planted, marker


def catalog_dir(directory: Path) -> Path:
    workloads = directory / "workloads"
    workloads.mkdir(exist_ok=True)
    (workloads / "tiny.py").write_text((TESTS / "workloads" / "tiny.py").read_text())
    return workloads


def queue_tampered_job(db: Database, workloads: Path, stored_workload: str) -> int:
    """A job submitted with a catalog workload, whose stored reference is then rewritten in the
    database with SQL, as anyone with write access to it could."""
    options = TuneOptions(workload=str(workloads / "tiny.py"), n_trials=1, device="cpu")
    job_id = create_job(db, options)
    tampered = json.dumps({**options.model_dump(mode="json"), "workload": stored_workload})
    as_json = "CAST(:options AS JSON)" if not db.is_sqlite else ":options"
    with db.engine.begin() as connection:
        connection.execute(
            text(f"UPDATE autotune_jobs SET options = {as_json} WHERE id = :id"),
            {"options": tampered, "id": job_id},
        )
    return job_id


def trial_count(db: Database, job_id: int) -> int:
    with db.session() as session:
        return int(session.scalar(select(func.count()).where(Trial.job_id == job_id)) or 0)


# -- (a) the stored workload is re-resolved against the worker's own catalog -----------------


def test_a_job_whose_stored_workload_left_the_catalog_fails_unrun(
    database: Database, tmp_path: Path
) -> None:
    """Run by the real tuner: were the file imported, its fork server would start a Python
    process, which this fast test's guard fails as well."""
    workloads = catalog_dir(tmp_path)
    planted, marker = planted_workload(tmp_path)
    job_id = queue_tampered_job(database, workloads, str(planted))
    worker = Worker(database, workloads_dir=workloads, worker_id="trusting-nothing")
    assert worker.run_once() == job_id
    job = load_job(database, job_id)
    assert job.status == "failed"
    assert job.error is not None and REFUSED in job.error and str(planted) in job.error
    assert trial_count(database, job_id) == 0
    assert not marker.exists()


@pytest.mark.parametrize("stored", ["autotune.cli:main", "builtin:no-such", None])
def test_a_module_an_unknown_builtin_or_no_workload_is_refused(
    database: Database, tmp_path: Path, stored: str | None
) -> None:
    job_id = queue_tampered_job(database, catalog_dir(tmp_path), stored)  # type: ignore[arg-type]
    Worker(database, workloads_dir=tmp_path / "workloads").run_once()
    job = load_job(database, job_id)
    assert job.status == "failed" and job.error is not None and REFUSED in job.error


def test_a_workload_the_catalog_holds_is_run(database: Database, tmp_path: Path) -> None:
    workloads = catalog_dir(tmp_path)
    job_id = queue_tampered_job(database, workloads, str((workloads / "tiny.py").resolve()))
    ran: list[int] = []

    def runner(db: Database, job_id: int, *, cancel: threading.Event, worker_id: str) -> Any:
        ran.append(job_id)

    Worker(database, workloads_dir=workloads, run_job=runner).run_once()
    assert ran == [job_id]


@pytest.mark.slow
def test_a_real_worker_fails_a_tampered_job_without_importing_it(
    database_url: str, tmp_path: Path
) -> None:
    """``autotune worker`` over a real database file (or PostgreSQL schema)."""
    workloads = catalog_dir(tmp_path)
    planted, marker = planted_workload(tmp_path)
    db = open_database(database_url)
    job_id = queue_tampered_job(db, workloads, str(planted))
    worker = start_autotune(
        ["worker", "--db", database_url, "--workloads-dir", str(workloads)],
        tmp_path / "worker.log",
    )
    try:
        job = wait_for(
            lambda: (j := load_job(db, job_id)).status == "failed" and j, 60, "the refusal"
        )
        assert trial_count(db, job_id) == 0
    finally:
        worker.stop()
        db.dispose()
    assert job.error is not None and REFUSED in job.error, worker.output()
    assert not marker.exists()
    assert "refused job" in worker.output()


# -- (b) trials get the environment less the service's credentials ---------------------------

SERVICE_ENV = {
    "AUTOTUNE_API_TOKEN": "t" * 32,
    "AUTOTUNE_API_TOKENS_FILE": "/etc/autotune/tokens",
    "AUTOTUNE_DB": "postgresql+psycopg://autotune:hunter2-pw@db:5432/autotune",
    "DATABASE_URL": "postgresql://autotune@db/autotune",
    "PGPASSWORD": "hunter2-pw",
    "MY_SECRET_KEY": "s3",
    "BACKUP_TARGET": "postgresql://autotune:hunter2-pw@backup/autotune",
    "COMMAND_LINE_DB": "postgresql://autotune:from-the-command-line@db/autotune",
}
KEPT = {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0", "HF_HOME": "/data/hf"}


def test_the_trial_environment_holds_no_token_and_no_database_url() -> None:
    withhold_from_trials("from-the-command-line")  # as a worker does with its --db password
    assert trial_environment({**SERVICE_ENV, **KEPT}) == KEPT


ENV_RECORDER = """
import json, os
from pathlib import Path
from tiny import _workload

def workload():
    Path(os.environ["RECORD_ENV_TO"]).write_text(json.dumps(sorted(os.environ.items())))
    return _workload("env-recorder")
"""


@pytest.mark.slow
@pytest.mark.parametrize("start", ["fork", "exec"])
def test_a_real_trial_sees_no_token_and_no_database_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str
) -> None:
    workloads = catalog_dir(tmp_path)
    (workloads / "recorder.py").write_text(ENV_RECORDER)
    record = tmp_path / "environ.json"
    for name, value in {**SERVICE_ENV, "RECORD_ENV_TO": str(record)}.items():
        monkeypatch.setenv(name, value)
    withhold_from_trials("from-the-command-line")
    workload = str(workloads / "recorder.py")
    if start == "fork":
        with TrialLauncher(workload, "cpu") as launcher:
            probe_workload(workload, "cpu")
            assert launcher.server_pid is not None, launcher.unavailable
    else:
        monkeypatch.setenv("AUTOTUNE_TRIAL_START", "exec")
        probe_workload(workload, "cpu")
    seen = dict(json.loads(record.read_text()))
    assert not set(SERVICE_ENV) & set(seen)
    assert not [name for name, value in seen.items() if "hunter2-pw" in value]
    assert seen["RECORD_ENV_TO"] == str(record)


# -- (c) the lock directory and its files are the user's alone -------------------------------


def test_the_lock_directory_is_private_and_its_files_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path / "locks"))
    handle = try_file_lock("device-cpu")
    assert handle is not None
    handle.close()
    assert stat.S_IMODE((tmp_path / "locks").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "locks" / "device-cpu.lock").stat().st_mode) == 0o600


def test_a_lock_file_left_world_writable_is_made_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LOCK_DIR_ENV, str(tmp_path))
    old = tmp_path / "device-cpu.lock"
    old.touch()
    old.chmod(0o666)
    handle = try_file_lock("device-cpu")
    assert handle is not None
    handle.close()
    assert stat.S_IMODE(old.stat().st_mode) == 0o600


def test_the_default_lock_directory_is_per_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(LOCK_DIR_ENV)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert lock_dir() == tmp_path / f"autotune-locks-{os.getuid()}"
    assert stat.S_IMODE(lock_dir().stat().st_mode) == 0o700


def refusal(monkeypatch: pytest.MonkeyPatch, directory: Path) -> str:
    monkeypatch.setenv(LOCK_DIR_ENV, str(directory))
    with pytest.raises(ConfigError) as refused:
        try_file_lock("device-cpu")
    message = str(refused.value)
    assert message.count(". ") == 0 and LOCK_DIR_ENV in message  # one sentence, with the fix
    return message


def test_a_group_or_world_writable_lock_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for mode in (0o770, 0o1777):
        shared = tmp_path / f"shared-{mode:o}"
        shared.mkdir()
        shared.chmod(mode)
        assert "not a directory private to this user" in refusal(monkeypatch, shared)
        assert not (shared / "device-cpu.lock").exists()


def test_a_lock_directory_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o755)
    if os.getuid() == 0:
        os.chown(foreign, 65534, 65534)
    else:
        foreign = Path("/")  # root's, and not writable by group or others
    assert "not a directory private to this user" in refusal(monkeypatch, foreign)


def test_a_link_planted_at_the_default_lock_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(LOCK_DIR_ENV)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / f"autotune-locks-{os.getuid()}").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="not a directory private to this user"):
        lock_dir()
