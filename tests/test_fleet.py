"""Several workers on one device and one database, tried as a team would run them.

Real ``autotune serve`` and ``autotune worker`` processes, real trials of the tiny workload,
on SQLite and on the PostgreSQL server.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conftest_service
import httpx
import psutil
import pytest
from conftest_service import (
    FAST_JOB,
    HEARTBEAT_TIMEOUT_S,
    Service,
    running_trials,
    start_service,
    wait_for,
)
from sqlalchemy import create_engine, select, text
from sqlalchemy.exc import OperationalError

from autotune.recommend import validate_recommendation
from autotune.store import Job, Trial, open_database

pytestmark = pytest.mark.slow
postgres_url = pytest.fixture(conftest_service.postgres_schema_url)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None  # start_service's own SQLite file
    else:
        yield from conftest_service.postgres_schema_url()


def submit(http: httpx.Client, **options: Any) -> int:
    response = http.post(
        "/v1/jobs", json={"workload": "tiny", **FAST_JOB, "fresh": True, **options}
    )
    assert response.status_code == 202, response.text
    return int(response.json()["id"])


def finished(http: httpx.Client, job_id: int) -> dict[str, Any] | None:
    job = http.get(f"/v1/jobs/{job_id}").json()
    return job if job["status"] in ("succeeded", "failed", "cancelled") else None


def stored(service: Service) -> tuple[list[Job], list[Trial]]:
    db = open_database(service.db_url)
    try:
        with db.session() as session:
            jobs = list(session.scalars(select(Job).order_by(Job.id)))
            trials = list(session.scalars(select(Trial).order_by(Trial.started_at)))
            session.expunge_all()
            return jobs, trials
    finally:
        db.dispose()


def overlapping(trials: list[Trial]) -> list[tuple[int, int]]:
    """Pairs of trials (ids) of which the second started before the first finished."""
    return [
        (a.id, b.id)
        for a, b in itertools.pairwise(trials)
        if a.finished_at is None or b.started_at < a.finished_at
    ]


def test_serve_and_a_worker_on_one_device_measure_one_trial_at_a_time(
    db_url: str | None,
    tmp_path: Path,
) -> None:
    """The README's setup: `autotune serve` (a worker inside) beside `autotune worker`."""
    service = start_service(tmp_path, embedded_worker=True, db_url=db_url)
    try:
        service.start_worker()
        with service.client() as http:
            job_ids = [submit(http), submit(http)]
            for job_id in job_ids:
                job = wait_for(
                    lambda job_id=job_id: finished(http, job_id), 300, f"job {job_id} to finish"
                )
                assert job["status"] == "succeeded", (job["error"], service.logs())
            documents = [http.get(f"/v1/jobs/{j}/recommendation").json() for j in job_ids]
    finally:
        service.stop()
    jobs, trials = stored(service)
    # Both workers ran a job, so their trials had the chance to overlap.
    assert len({job.worker_id for job in jobs}) == 2, service.logs()
    assert len({job.device_class for job in jobs}) == 1
    assert len(trials) >= 2 * FAST_JOB["n_trials"]
    assert overlapping(trials) == [], service.logs()
    for document in documents:  # the same recommendation a single worker writes
        validate_recommendation(document)
        assert set(document) == set(documents[0])


def worker_of(service: Service, job_id: int) -> str | None:
    jobs, _ = stored(service)
    return next(job.worker_id for job in jobs if job.id == job_id)


def _writable(db_url: str, job_id: int) -> bool:
    """Whether another process could write the job's row within a second now."""
    engine = create_engine(
        db_url, connect_args={"timeout": 1.0} if db_url.startswith("sqlite") else {}
    )
    try:
        with engine.begin() as connection:
            if engine.dialect.name == "postgresql":
                connection.execute(text("SET LOCAL lock_timeout = '1s'"))
            connection.execute(
                text("UPDATE autotune_jobs SET id = id WHERE id = :id"), {"id": job_id}
            )
        return True
    except OperationalError:
        return False
    finally:
        engine.dispose()


def pause_outside_its_writes(pid: int, db_url: str, job_id: int, attempts: int = 20) -> None:
    """SIGSTOP the worker ``pid`` at a moment it holds no write lock. Stopped inside one of its
    millisecond transactions it would block every other writer until it resumes (SQLite has one
    writer; PostgreSQL locks the job's row): another failure than the one under test, and what
    once made this test time out waiting for the takeover."""
    for _ in range(attempts):
        os.kill(pid, signal.SIGSTOP)
        if _writable(db_url, job_id):
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.2)
    raise AssertionError(f"worker {pid} held a write lock at each of {attempts} pauses")


def test_a_paused_worker_that_lost_its_lease_writes_nothing_when_it_wakes(
    db_url: str | None,
    tmp_path: Path,
) -> None:
    """SIGSTOP a worker mid-trial past its lease, let another take the job, then SIGCONT:
    no trial is stored twice, none is lost, and the trials never overlap."""
    service = start_service(tmp_path, db_url=db_url)
    try:
        paused = service.start_worker()
        with service.client() as http:
            job_id = submit(http, n_trials=4)
            wait_for(
                lambda: (
                    http.get(f"/v1/jobs/{job_id}").json()["progress"]["trials_done"] >= 1
                    and running_trials(paused)
                ),
                120,
                "a finished trial and a running one",
            )
            pause_outside_its_writes(paused.pid, service.db_url, job_id)
            try:
                paused_id = worker_of(service, job_id)
                _, before = stored(service)
                service.start_worker()
                # The new worker starts (imports torch, on cores the paused worker's trial still
                # uses), waits out the lease and claims the job: 24 s was not always enough.
                try:
                    wait_for(
                        lambda: worker_of(service, job_id) not in (paused_id, None),
                        HEARTBEAT_TIMEOUT_S + 60,
                        "the second worker to take the job over",
                    )
                except AssertionError as exc:
                    raise AssertionError(f"{exc}\n{service.logs()}") from None
            finally:
                os.kill(paused.pid, signal.SIGCONT)
            try:
                job = wait_for(lambda: finished(http, job_id), 300, "the job to finish")
            except AssertionError as exc:
                raise AssertionError(
                    f"{exc}; the job: {http.get(f'/v1/jobs/{job_id}').json()}\n{service.logs()}"
                ) from None
            assert job["status"] == "succeeded", (job["error"], service.logs())
            assert job["attempts"] == 2
    finally:
        service.stop()
    _, trials = stored(service)
    numbers = sorted(trial.number for trial in trials)
    assert numbers == list(range(1, len(numbers) + 1)), "a trial number repeated or skipped"
    kept = {trial.id for trial in trials}
    assert {trial.id for trial in before} <= kept, "a trial stored before the pause was lost"
    assert overlapping(trials) == [], service.logs()
    # The trial the paused worker ran is retried by the new owner; had the paused worker
    # stored its result too, that configuration would count twice here.
    searched = [t.config_key for t in trials if t.phase != "confirm" and not t.interrupted]
    assert len(searched) == len(set(searched)) == 4, service.logs()


class TcpProxy:
    """A TCP forwarder to PostgreSQL that can be stopped and started again on its port, as
    a server restart looks to its clients: connections reset, then refused, then accepted."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = conftest_service.free_port()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None

    def start(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                target.sendall(data)
        for end in (source, target):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        assert self._listener is not None
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() blocked on it
        self._listener.close()
        for end in self._sockets:  # both sides see the connection end, as in a restart
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)  # (close alone would not wake a recv())
            end.close()
        self._sockets.clear()


@pytest.mark.postgres
def test_a_database_restart_mid_job_requeues_it_and_the_worker_reconnects(
    postgres_url: str,
    tmp_path: Path,
) -> None:
    direct = postgres_url
    proxy = TcpProxy(("127.0.0.1", 5432))
    proxy.start()
    service = start_service(tmp_path, db_url=direct)
    try:
        worker = conftest_service.start_autotune(
            [
                "worker",
                "--db",
                direct.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}"),
                "--heartbeat-timeout",
                str(HEARTBEAT_TIMEOUT_S),
                "--poll-interval",
                "0.2",
                "--workloads-dir",
                str(service.directory / "workloads"),
            ],
            tmp_path / "worker-through-proxy.log",
        )
        service.workers.append(worker)
        with service.client() as http:
            job_id = submit(http, n_trials=4)
            wait_for(
                lambda: (
                    http.get(f"/v1/jobs/{job_id}").json()["progress"]["trials_done"] >= 1
                    and running_trials(worker)
                ),
                120,
                "a finished trial and a running one",
            )
            proxy.stop()  # down for longer than a trial: its result cannot be stored
            time.sleep(HEARTBEAT_TIMEOUT_S + 2)
            assert http.get(f"/v1/jobs/{job_id}").json()["status"] == "running"
            proxy.start()
            job = wait_for(lambda: finished(http, job_id), 200, "the job to finish")
        assert job["status"] == "succeeded", (job["error"], service.logs())
        assert job["attempts"] == 1  # the requeue gave its attempt back
        assert "putting it back in the queue" in worker.output(), service.logs()
    finally:
        service.stop()
        proxy.stop()


def test_the_trial_of_a_worker_killed_with_sigkill_dies_with_it(tmp_path: Path) -> None:
    """Only the worker is killed (not its process tree): its trial must not go on measuring
    on the device its replacement is about to use."""
    service = start_service(tmp_path)
    # Its trials hang in the data loader and never report: nothing but the worker's death
    # can tell them to stop.
    shutil.copy(
        conftest_service.TESTS / "workloads" / "hang.py", tmp_path / "workloads" / "hang.py"
    )
    try:
        worker = service.start_worker()
        with service.client() as http:
            submit(http, workload="hang", trial_timeout_s=600)
            wait_for(lambda: stored(service)[0][0].space is not None, 120, "the probe to finish")
            trials = wait_for(lambda: running_trials(worker), 60, "a trial process")
            os.kill(worker.pid, signal.SIGKILL)
            worker.popen.wait(10)
            _, alive = psutil.wait_procs(trials, timeout=15)
            assert alive == [], f"orphaned trial processes still run: {alive}"
    finally:
        service.stop()
