"""/healthz and /readyz of a real ``autotune serve``: liveness needs neither the database nor a
thread of the pool the other endpoints share; readiness is the database answering.

An orchestrator restarts a server whose liveness probe fails: a probe that waited for the
database would restart a server that is only busy (every thread waiting on the database, as in
benchmarks/RESULTS.md#service-under-load) or whose database is down, which fixes neither.
"""

from __future__ import annotations

import contextlib
import inspect
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import httpx
import pytest
from autotune_api.limits import DatabaseAdmission
from autotune_api.routes import ops
from conftest_service import Service, add_job, postgres_schema_url, start_service
from fastapi.routing import APIRoute
from sqlalchemy import make_url

from autotune.store import open_database

#: More requests than anyio's default thread pool has threads (40), fewer than the connections
#: ``autotune serve`` accepts at once (AUTOTUNE_LIMIT_CONCURRENCY, 64).
BLOCKED_REQUESTS = 50
#: What a probe may take while the server is saturated: generous for a loaded 2-core machine,
#: far below the seconds a request queued behind the blocked threads waits.
PROBE_TIMEOUT_S = 2.0


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    running = start_service(tmp_path, env={"AUTOTUNE_SUBMISSIONS_PER_MINUTE": "1000"})
    yield running
    running.stop()


@contextlib.contextmanager
def write_lock(db_file: Path) -> Iterator[None]:
    """SQLite's write lock on ``db_file``, held by this test: every write of the server waits."""
    connection = sqlite3.connect(db_file, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        yield
        connection.execute("ROLLBACK")
    finally:
        connection.close()


def test_liveness_runs_on_the_event_loop_and_needs_nothing() -> None:
    # A sync endpoint, or any dependency, would queue /healthz for a thread of the shared pool
    # behind every busy request (the load benchmark's p99 of several hundred ms).
    route = next(r for r in ops.router.routes if getattr(r, "path", None) == "/healthz")
    assert isinstance(route, APIRoute)
    assert inspect.iscoroutinefunction(route.endpoint)
    assert route.dependant.dependencies == [] and route.dependencies == []


@pytest.mark.slow  # a real server, and seconds of a held lock
def test_requests_beyond_the_connection_pool_wait_their_turn_and_probes_answer(
    service: Service,
) -> None:
    database = open_database(service.db_url)
    try:
        job_id = add_job(database)
    finally:
        database.dispose()
    with (
        ThreadPoolExecutor(BLOCKED_REQUESTS) as pool,
        httpx.Client(base_url=service.base_url, timeout=60) as blocking,
        httpx.Client(base_url=service.base_url) as http,
    ):
        with write_lock(Path(make_url(service.db_url).database or "")):
            # Each cancel waits for the write lock, holding a connection or waiting for one.
            blocked = [
                pool.submit(blocking.post, f"/v1/jobs/{job_id}/cancel")
                for _ in range(BLOCKED_REQUESTS)
            ]
            time.sleep(1.0)
            with pytest.raises(httpx.TimeoutException):  # a read waits its turn too
                http.get("/v1/workloads", timeout=PROBE_TIMEOUT_S)
            started = time.perf_counter()
            health = http.get("/healthz", timeout=PROBE_TIMEOUT_S)
            assert health.status_code == 200 and health.json() == {"status": "ok"}
            ready = http.get("/readyz", timeout=PROBE_TIMEOUT_S)  # reads pass the write lock
            assert ready.status_code == 200 and ready.json() == {"status": "ok"}
            assert time.perf_counter() - started < PROBE_TIMEOUT_S
        released = time.perf_counter()
        # Released, every blocked request is answered at once: none holds a connection while
        # it waits for a thread that requests waiting for a connection hold, until the pool's
        # timeout (30 s) fails them with 503.
        statuses = {future.result().status_code for future in blocked}
        waited_s = time.perf_counter() - released
    assert statuses <= {202, 409} and waited_s < 10


class Forwarder:
    """A TCP forwarder from a free loopback port to ``target``, that can be cut: the database
    out of reach without stopping it."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # cut
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        """Refuse new connections and reset the open ones."""
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


@pytest.mark.slow
@pytest.mark.postgres
def test_health_answers_and_readiness_fails_while_the_database_is_out_of_reach(
    tmp_path: Path,
) -> None:
    for url in postgres_schema_url():
        direct = make_url(url)
        forwarder = Forwarder((direct.host or "127.0.0.1", direct.port or 5432))
        proxied = direct.set(port=forwarder.port).render_as_string(hide_password=False)
        service = start_service(tmp_path, db_url=proxied)
        try:
            with service.client() as http:
                assert http.get("/readyz").json() == {"status": "ok"}
                forwarder.cut()
                health = http.get("/healthz", timeout=PROBE_TIMEOUT_S)
                assert health.status_code == 200 and health.json() == {"status": "ok"}
                ready = http.get("/readyz")
                assert ready.status_code == 503
                assert ready.json()["detail"].startswith("the database did not answer")
        finally:
            forwarder.cut()
            service.stop()


@pytest.mark.parametrize(
    ("limit", "admitted"),
    # SQLite's pool holds 5 connections and 10 overflow; 3 stay for the worker and /readyz.
    [(2, 2), (4, 4), (1000, 12)],
)
def test_database_admission_lets_in_its_limit_and_never_more_than_the_pool(
    tmp_path: Path, limit: int, admitted: int
) -> None:
    database = open_database(f"sqlite:///{tmp_path / 'jobs.db'}")
    inside, most = 0, 0

    async def endpoint(scope: Any, receive: Any, send: Any) -> None:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await anyio.sleep(0.01)
        inside -= 1

    admission = DatabaseAdmission(endpoint, exempt=ops.PROBES, limit=limit)
    app = SimpleNamespace(state=SimpleNamespace(database=database))

    async def requests(path: str, count: int) -> None:
        async with anyio.create_task_group() as group:
            for _ in range(count):
                scope = {"type": "http", "path": path, "app": app}
                group.start_soon(admission, scope, None, None)

    try:
        anyio.run(requests, "/v1/jobs", 40)
        assert most == admitted
        most = 0
        anyio.run(requests, "/healthz", 40)  # the probes never wait here
        assert most == 40
    finally:
        database.dispose()
