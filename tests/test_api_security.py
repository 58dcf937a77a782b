"""The API's safety whatever way it is started: plain ``uvicorn --factory``, public binds,
several uvicorn workers. Real uvicorn processes on this machine's addresses."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from conftest_service import clean_env, free_port, wait_for

pytestmark = pytest.mark.slow

TOKEN = "s3cret-token-for-the-tests-0123"


def non_loopback_address() -> str:
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if (
                address.family == socket.AF_INET
                and not ipaddress.ip_address(address.address).is_loopback
            ):
                return str(address.address)
    pytest.skip("this machine has no non-loopback IPv4 address to connect from")


class Uvicorn:
    def __init__(self, tmp_path: Path, *args: str, **env: str) -> None:
        self.port = free_port()
        self.log = tmp_path / f"uvicorn-{self.port}.log"
        with self.log.open("wb") as out:
            self.popen = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "--factory",
                    "autotune_api.main:create_app",
                    "--host",
                    "0.0.0.0",
                    "--port",
                    str(self.port),
                    *args,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=clean_env(AUTOTUNE_DB=str(tmp_path / "api.db"), **env),
            )
        wait_for(self._up, 60, "uvicorn to answer on 127.0.0.1")

    def _up(self) -> bool:
        if self.popen.poll() is not None:
            raise AssertionError(self.log.read_text())
        try:
            httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=2)
        except httpx.HTTPError:
            return False
        return True

    def url(self, host: str) -> str:
        return f"http://{host}:{self.port}"

    def stop(self) -> None:
        self.popen.terminate()
        try:
            self.popen.wait(30)
        except subprocess.TimeoutExpired:
            self.popen.kill()


@pytest.fixture
def tokenless(tmp_path: Path) -> Iterator[Uvicorn]:
    server = Uvicorn(tmp_path, AUTOTUNE_EMBEDDED_WORKER="false")
    yield server
    server.stop()


def test_without_a_token_remote_clients_are_refused_even_on_a_public_bind(
    tokenless: Uvicorn,
) -> None:
    remote = httpx.get(f"{tokenless.url(non_loopback_address())}/v1/jobs", timeout=10)
    assert remote.status_code == 403
    assert "AUTOTUNE_API_TOKEN" in remote.json()["detail"]
    refused_write = httpx.post(
        f"{tokenless.url(non_loopback_address())}/v1/jobs",
        json={"workload": "builtin:image-cnn"},
        timeout=10,
    )
    assert refused_write.status_code == 403
    assert httpx.get(f"{tokenless.url('127.0.0.1')}/v1/jobs", timeout=10).status_code == 200


def test_a_page_on_a_rebound_domain_is_refused(tokenless: Uvicorn) -> None:
    """DNS rebinding: the browser connects to 127.0.0.1 but sends the attacker's host name."""
    rebound = httpx.get(
        f"{tokenless.url('127.0.0.1')}/v1/jobs",
        headers={"host": f"attacker.example:{tokenless.port}"},
        timeout=10,
    )
    assert rebound.status_code == 400
    named = httpx.get(f"{tokenless.url('localhost')}/v1/jobs", timeout=10)
    assert named.status_code == 200


def test_no_cors_headers_unless_origins_are_configured(tmp_path: Path, tokenless: Uvicorn) -> None:
    preflight = {"origin": "http://evil.example", "access-control-request-method": "POST"}
    response = httpx.options(f"{tokenless.url('127.0.0.1')}/v1/jobs", headers=preflight, timeout=10)
    assert "access-control-allow-origin" not in response.headers
    allowed = Uvicorn(
        tmp_path,
        AUTOTUNE_EMBEDDED_WORKER="false",
        AUTOTUNE_CORS_ORIGINS='["http://dashboard.example"]',
    )
    try:
        response = httpx.options(
            f"{allowed.url('127.0.0.1')}/v1/jobs",
            timeout=10,
            headers={**preflight, "origin": "http://dashboard.example"},
        )
        assert response.headers["access-control-allow-origin"] == "http://dashboard.example"
    finally:
        allowed.stop()


def test_with_a_token_remote_clients_need_it_for_every_v1_request(tmp_path: Path) -> None:
    server = Uvicorn(tmp_path, AUTOTUNE_EMBEDDED_WORKER="false", AUTOTUNE_API_TOKEN=TOKEN)
    try:
        remote = server.url(non_loopback_address())
        assert httpx.get(f"{remote}/v1/jobs", timeout=10).status_code == 401
        write = httpx.post(f"{remote}/v1/jobs", json={"workload": "builtin:image-cnn"}, timeout=10)
        assert write.status_code == 401
        authorized = httpx.get(
            f"{remote}/v1/jobs", timeout=10, headers={"authorization": f"Bearer {TOKEN}"}
        )
        assert authorized.status_code == 200
    finally:
        server.stop()


def test_uvicorn_workers_start_one_embedded_worker_per_host(tmp_path: Path) -> None:
    server = Uvicorn(tmp_path, "--workers", "2")
    try:
        wait_for(
            lambda: "serves the API only" in server.log.read_text(),
            60,
            "the second uvicorn process to start without an embedded worker",
        )
    finally:
        server.stop()
    log = server.log.read_text()
    assert log.count("serves the API only") == 1, log
    assert log.count("Application startup complete") == 2, log
