"""The service's limits and security headers, against a real ``autotune serve``: the queue cap,
the submission rate, the caps on a job's trials and time budget, uvicorn's concurrency limit,
the headers on every answer and the docs pages being off by default."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conftest_browser
import httpx
import pytest
from autotune_api.headers import CONTENT_SECURITY_POLICY, SECURITY_HEADERS
from autotune_api.limits import SlidingWindowLimit
from autotune_api.settings import load_settings
from conftest_browser import wait_ready
from conftest_service import Service, start_service
from playwright.sync_api import Browser
from test_api import store_job

from autotune.cli._service import uvicorn_config
from autotune.errors import ConfigError

MAX_QUEUED = 3
MAX_TRIALS = 50
DEFAULT_BUDGET_S = 600
MAX_BUDGET_S = 7200

browser = conftest_browser.browser


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = start_service(
        tmp_path_factory.mktemp("limits"),
        env={
            "AUTOTUNE_MAX_QUEUED_JOBS": str(MAX_QUEUED),
            "AUTOTUNE_MAX_TRIALS": str(MAX_TRIALS),
            "AUTOTUNE_DEFAULT_TIME_BUDGET_S": str(DEFAULT_BUDGET_S),
            "AUTOTUNE_MAX_TIME_BUDGET_S": str(MAX_BUDGET_S),
        },
    )
    yield running
    running.stop()


@pytest.fixture
def http(service: Service) -> Iterator[httpx.Client]:
    with service.client() as client:
        yield client


def submit(http: httpx.Client, **body: Any) -> httpx.Response:
    return http.post("/v1/jobs", json={"workload": "tiny", "n_trials": 2, **body})


def queued_ids(http: httpx.Client) -> set[int]:
    page = http.get("/v1/jobs", params={"status": "queued", "limit": 100}).json()
    return {job["id"] for job in page["data"]}


def cancel_all(http: httpx.Client, ids: set[int]) -> None:
    for job_id in ids:
        assert http.post(f"/v1/jobs/{job_id}/cancel").status_code == 202


# -- the queue cap ---------------------------------------------------------------------------


def test_a_full_queue_answers_429_and_keeps_every_queued_job(http: httpx.Client) -> None:
    before = queued_ids(http)
    for _ in range(MAX_QUEUED - len(before)):
        assert submit(http).status_code == 202
    queued = queued_ids(http)
    assert len(queued) == MAX_QUEUED
    try:
        refused = submit(http)
        assert refused.status_code == 429, refused.text
        assert refused.headers["Retry-After"].isdigit()
        assert "the queue is full" in refused.json()["detail"]
        assert queued_ids(http) == queued  # nothing stored was dropped, nothing added
    finally:
        cancel_all(http, queued)
    accepted = submit(http)  # room again once the queue drains
    assert accepted.status_code == 202, accepted.text
    cancel_all(http, {accepted.json()["id"]})


# -- caps on one job -------------------------------------------------------------------------


def test_a_job_without_a_time_budget_gets_the_servers_default(http: httpx.Client) -> None:
    response = submit(http)
    assert response.status_code == 202, response.text
    cancel_all(http, {response.json()["id"]})
    assert response.json()["options"]["time_budget_s"] == DEFAULT_BUDGET_S
    named = submit(http, time_budget_s=MAX_BUDGET_S)
    assert named.status_code == 202, named.text
    cancel_all(http, {named.json()["id"]})
    assert named.json()["options"]["time_budget_s"] == MAX_BUDGET_S


@pytest.mark.parametrize(
    ("field", "value"), [("time_budget_s", MAX_BUDGET_S + 1), ("n_trials", MAX_TRIALS + 1)]
)
def test_a_job_over_the_servers_maximum_is_refused(
    http: httpx.Client, field: str, value: int
) -> None:
    count = http.get("/v1/jobs").json()["count"]
    response = submit(http, **{field: value})
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", field]
    assert "than this server's maximum" in error["msg"]
    assert http.get("/v1/jobs").json()["count"] == count


def test_a_default_budget_over_the_maximum_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="default time budget"):
        load_settings(db=str(tmp_path / "a.db"), default_time_budget_s=7200, max_time_budget_s=3600)


# -- the submission rate ---------------------------------------------------------------------


def test_a_client_past_its_rate_waits_until_its_oldest_submission_leaves_the_window() -> None:
    now = [0.0]
    rate = SlidingWindowLimit(limit=2, window_s=60, clock=lambda: now[0])
    assert rate.admit("a") is None
    now[0] = 10.0
    assert rate.admit("a") is None
    assert rate.admit("b") is None  # another client has its own window
    now[0] = 20.0
    assert rate.admit("a") == 40  # the first leaves the window at 60 s
    now[0] = 60.5
    assert rate.admit("a") is None
    assert rate.admit("a") == 10  # the second leaves at 70 s


@pytest.mark.slow
def test_submissions_past_the_per_client_rate_answer_429_and_docs_can_be_turned_on(
    tmp_path: Path,
) -> None:
    running = start_service(
        tmp_path, env={"AUTOTUNE_SUBMISSIONS_PER_MINUTE": "2", "AUTOTUNE_API_DOCS": "true"}
    )
    try:
        with running.client() as http:
            assert [submit(http).status_code for _ in range(2)] == [202, 202]
            refused = submit(http)
            assert refused.status_code == 429, refused.text
            assert 1 <= int(refused.headers["Retry-After"]) <= 60
            assert "AUTOTUNE_SUBMISSIONS_PER_MINUTE" in refused.json()["detail"]
            assert http.get("/v1/jobs").json()["count"] == 2
            for path in ("/docs", "/redoc"):
                page = http.get(path)
                assert page.status_code == 200
                # The pages' CDN scripts are allowed on them, and only on them.
                assert "cdn.jsdelivr.net" in page.headers["Content-Security-Policy"]
            assert http.get("/").headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    finally:
        running.stop()


# -- uvicorn ---------------------------------------------------------------------------------


def test_serve_passes_its_concurrency_limit_to_uvicorn(tmp_path: Path) -> None:
    db = str(tmp_path / "a.db")
    assert uvicorn_config(load_settings(db=db), "info").limit_concurrency == 64
    assert uvicorn_config(load_settings(db=db, limit_concurrency=5), "info").limit_concurrency == 5


# -- headers and docs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/", "/jobs/1", "/compare", "/v1/jobs", "/healthz", "/openapi.json", "/nowhere"]
)
def test_every_answer_carries_the_security_headers(http: httpx.Client, path: str) -> None:
    response = http.get(path)
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, (path, name)
    policy = response.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in policy
    assert "script-src 'self';" in policy  # no inline or evaluated script


def test_the_api_docs_pages_are_off_by_default(http: httpx.Client) -> None:
    assert http.get("/docs").status_code == 404
    assert http.get("/redoc").status_code == 404
    assert http.get("/openapi.json").status_code == 200


@pytest.mark.slow
def test_the_dashboard_runs_under_its_content_security_policy(
    browser: Browser, service: Service
) -> None:
    job_id = store_job(service, status="cancelled")  # with two trials to plot
    for path in ("/", f"/jobs/{job_id}"):
        context = browser.new_context(viewport={"width": 1300, "height": 900})
        page = context.new_page()
        messages: list[str] = []
        page.on("console", lambda message, seen=messages: seen.append(message.text))
        page.goto(service.base_url + path)
        wait_ready(page)
        context.close()
        violations = [text for text in messages if "Content Security Policy" in text]
        assert not violations, (path, violations)
