"""Fixtures of the service tests: both databases, and real servers and workers as processes.

Service test modules import the helpers, and take the fixtures by assignment
(``database = conftest_service.database``) so that pytest finds them in the module.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil
import pytest
from sqlalchemy import create_engine, text

from autotune.store import LOCK_DIR_ENV, Database, Job, open_database

POSTGRES_URL = os.environ.get(
    "AUTOTUNE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
TESTS = Path(__file__).parent
#: The smallest job that still searches, confirms and recommends (a few seconds a trial).
FAST_JOB: dict[str, Any] = {
    "n_trials": 3,
    "min_seconds": 0.3,
    "min_steps": 3,
    "warmup_steps": 1,
    "confirm_rounds": 1,
    "confirm_top": 1,
    # The profile (about 10 s a job) and torch.compile (15 s and more a compiled trial on this
    # CPU) have their own tests (test_profile.py, test_compile.py); service tests test the
    # service.
    "profile": False,
    "fixed": {"compile": "off"},
}
#: Short, so that a killed worker's job is taken over quickly (heartbeats every 2 s).
HEARTBEAT_TIMEOUT_S = 6.0
#: How the tests run ``autotune``: the installed console script's own entry point.
AUTOTUNE = [sys.executable, "-c", "from autotune.cli import main; main()"]

T = TypeVar("T")


def wait_for(check: Callable[[], T | None], timeout_s: float, what: str) -> T:
    """Poll ``check`` until it returns something truthy; fail the test naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- databases -------------------------------------------------------------------------------


def postgres_schema_url() -> Iterator[str]:
    """A PostgreSQL URL whose tables go to a fresh schema, dropped afterwards (or a skip)."""
    admin = create_engine(POSTGRES_URL)
    schema = f"autotune_test_{uuid.uuid4().hex[:10]}"
    try:
        with admin.begin() as connection:
            connection.execute(text(f"CREATE SCHEMA {schema}"))
    except Exception as exc:  # no server here: the postgres tests cannot run
        admin.dispose()
        unreachable = f"PostgreSQL at {POSTGRES_URL} is not reachable ({type(exc).__name__})"
        if os.environ.get("CI"):  # CI has the server: a skip there would hide a failure
            pytest.fail(unreachable)
        pytest.skip(unreachable)
    try:
        yield f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as connection:
            connection.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: a SQLite file, then a private PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        yield from postgres_schema_url()


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    db = open_database(database_url)
    yield db
    db.dispose()


# -- processes -------------------------------------------------------------------------------


@dataclass
class Process:
    """An ``autotune`` command running in the background, its output in a log file."""

    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill_tree(self) -> None:
        """SIGKILL the process and every process under it (trials run in their own groups).

        The process first, so that it cannot see a trial die and store it as crashed.
        """
        try:
            children = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        for process in [psutil.Process(self.pid), *children]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        self.popen.wait(timeout=10)
        psutil.wait_procs(children, timeout=10)

    def stop(self) -> None:
        """SIGTERM and wait; whatever is still alive after that is killed."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=30)
        if self.popen.poll() is None:
            self.kill_tree()


def running_trials(worker: Process) -> list[psutil.Process]:
    """The trial processes the worker's fork server has forked that still run (and theirs).

    Not every process under the worker: its fork server stays alive between trials, so a worker
    with children may be storing one trial's result or asking for the next, with none running.
    """
    trials = []
    for child in psutil.Process(worker.pid).children():
        with contextlib.suppress(psutil.NoSuchProcess):
            if "autotune.runner._forkserver" in child.cmdline():
                trials += [
                    t for t in child.children(recursive=True) if t.status() != psutil.STATUS_ZOMBIE
                ]
    return trials


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without AUTOTUNE_* (a developer's own database or token), plus ``extra``.

    The test session's device-lock directory is kept (see ``conftest.py``).
    """
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_") or k == LOCK_DIR_ENV
    }
    return {**environment, **extra}


def start_autotune(args: list[str], log: Path, env: dict[str, str] | None = None) -> Process:
    with log.open("ab") as out:
        popen = subprocess.Popen(
            [*AUTOTUNE, *args], stdout=out, stderr=subprocess.STDOUT, env=clean_env(**(env or {}))
        )
    return Process(popen, log)


@dataclass
class Service:
    """A real ``autotune serve`` on a loopback port, and the workers started for it."""

    db_url: str
    base_url: str
    server: Process
    directory: Path
    workers: list[Process] = field(default_factory=list)

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30)

    def start_worker(self, heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S) -> Process:
        log = self.directory / f"worker-{len(self.workers)}.log"
        worker = start_autotune(
            [
                "worker",
                "--db",
                self.db_url,
                "--heartbeat-timeout",
                str(heartbeat_timeout_s),
                "--poll-interval",
                "0.2",
                "--workloads-dir",
                str(self.directory / "workloads"),
            ],
            log,
        )
        self.workers.append(worker)
        return worker

    def logs(self) -> str:
        """The last lines of the server's and the workers' output, for failure messages."""
        return "\n".join(
            f"--- {p.log.name}\n" + "\n".join(p.output().splitlines()[-30:])
            for p in [self.server, *self.workers]
        )

    def stop_workers(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.workers.clear()

    def stop(self) -> None:
        self.stop_workers()
        self.server.stop()


def start_service(
    directory: Path,
    env: dict[str, str] | None = None,
    embedded_worker: bool = False,
    db_url: str | None = None,
) -> Service:
    """``autotune serve`` on a free port, over a SQLite file in ``directory`` by default."""
    directory.mkdir(parents=True, exist_ok=True)
    workloads = directory / "workloads"
    workloads.mkdir(exist_ok=True)
    shutil.copy(TESTS / "workloads" / "tiny.py", workloads / "tiny.py")
    db_url = db_url or f"sqlite:///{directory / 'service.db'}"
    port = free_port()
    server = start_autotune(
        [
            "serve",
            "--port",
            str(port),
            "--db",
            db_url,
            "--workloads-dir",
            str(workloads),
            "--worker" if embedded_worker else "--no-worker",
            "--heartbeat-timeout",
            str(HEARTBEAT_TIMEOUT_S),
            "--log-level",
            "warning",
        ],
        directory / "server.log",
        env,
    )
    service = Service(db_url, f"http://127.0.0.1:{port}", server, directory)

    def up() -> bool:
        if server.popen.poll() is not None:
            raise AssertionError(f"autotune serve exited:\n{server.output()}")
        try:
            return httpx.get(f"{service.base_url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, 60, "the server to answer /healthz")
    except BaseException:
        service.stop()
        raise
    return service


def add_job(db: Database, **values: object) -> int:
    """A queued job row, straight into the database (as a submitted job would be)."""
    with db.session() as session:
        job = Job(
            workload="builtin:image-cnn",
            options={"workload": "builtin:image-cnn", "n_trials": 3},
            **values,
        )
        session.add(job)
        session.flush()
        return job.id
