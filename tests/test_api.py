"""The REST API over HTTP against a real ``autotune serve``: resources, bad input, auth, limits.

No worker runs here, so submitted jobs stay queued; finished jobs are written to the database
directly. Jobs that really run are in ``test_api_jobs.py``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from autotune_api.settings import load_settings
from conftest_service import AUTOTUNE, Service, clean_env, postgres_schema_url, start_service
from typer.testing import CliRunner

from autotune.cli._service import register
from autotune.errors import ConfigError
from autotune.store import Job, Trial, open_database, utcnow

TOKEN = "correct-horse-battery-staple"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = start_service(tmp_path_factory.mktemp("api"))
    yield running
    running.stop()


@pytest.fixture
def http(service: Service) -> Iterator[httpx.Client]:
    with service.client() as client:
        yield client


def submit(http: httpx.Client, **body: Any) -> httpx.Response:
    return http.post("/v1/jobs", json={"workload": "tiny", **body})


def store_job(service: Service, **values: Any) -> int:
    """A job written straight to the database, as a worker would have left it."""
    db = open_database(service.db_url)
    try:
        with db.session() as session:
            job = Job(workload="builtin:image-cnn", options={"n_trials": 2}, **values)
            session.add(job)
            session.flush()
            for number in (1, 2):
                session.add(
                    Trial(
                        job=job,
                        number=number,
                        phase="search",
                        config={"batch_size": 8 * number},
                        config_key=str(number),
                        outcome="ok",
                        samples_per_s=100.0 * number,
                        losses_finite=True,
                        duration_s=1.5,
                    )
                )
            return job.id
    finally:
        db.dispose()


def detail(response: httpx.Response) -> str:
    """The error sentence(s) of a response, whatever FastAPI shape they came in."""
    body = response.json()["detail"]
    return body if isinstance(body, str) else " | ".join(item["msg"] for item in body)


# -- the resources ---------------------------------------------------------------------------


def test_workloads_are_builtins_and_the_configured_directory(http: httpx.Client) -> None:
    listing = http.get("/v1/workloads").json()
    names = {item["name"]: item["source"] for item in listing["data"]}
    assert names["builtin:slow-storage"] == "builtin"
    assert names["tiny"] == "directory"
    assert listing["count"] == len(listing["data"])


def test_submit_answers_202_with_the_job_and_its_location(http: httpx.Client) -> None:
    response = submit(http, n_trials=5, fixed={"amp": "off"}, ranges={"batch_size": "8..64"})
    assert response.status_code == 202
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["status"] == "queued" and job["workload"] == "tiny"
    assert job["options"]["n_trials"] == 5 and job["options"]["workload"] == "tiny"
    assert job["progress"] == {
        "trials_done": 0,
        "trials_budget": 5,
        "confirm_done": 0,
        "best": None,
    }
    assert http.get(response.headers["location"]).json() == job


def test_list_pages_and_filters_by_status(service: Service, http: httpx.Client) -> None:
    submit(http)
    done = store_job(service, status="succeeded")
    page = http.get("/v1/jobs", params={"limit": 1}).json()
    assert len(page["data"]) == 1 and page["count"] >= 2
    assert page["data"][0]["id"] == done  # newest first
    succeeded = http.get("/v1/jobs", params={"status": "succeeded"}).json()
    assert {job["status"] for job in succeeded["data"]} == {"succeeded"}
    queued = http.get("/v1/jobs", params={"status": "queued", "offset": 0}).json()
    assert queued["count"] >= 1 and all(j["status"] == "queued" for j in queued["data"])


def test_progress_trials_and_recommendation_of_a_finished_job(
    service: Service, http: httpx.Client
) -> None:
    document = {"schema": "autotune.recommendation/v1", "config": {"batch_size": 16}}
    job_id = store_job(service, status="succeeded", recommendation=document, finished_at=utcnow())
    job = http.get(f"/v1/jobs/{job_id}").json()
    assert job["recommendation_ready"] is True
    assert job["progress"]["trials_done"] == 2
    assert job["progress"]["best"]["number"] == 2
    assert job["progress"]["best"]["samples_per_s"] == 200.0
    trials = http.get(f"/v1/jobs/{job_id}/trials", params={"limit": 1, "offset": 1}).json()
    assert trials["count"] == 2 and [t["number"] for t in trials["data"]] == [2]
    assert trials["data"][0]["outcome"] == "ok" and "peak_memory_bytes" in trials["data"][0]
    assert http.get(f"/v1/jobs/{job_id}/recommendation").json() == document


def test_system_health_and_metrics(service: Service, http: httpx.Client) -> None:
    store_job(service, status="failed", error="boom")
    system = http.get("/v1/system").json()
    assert system["cpu"]["count"] >= 1 and system["devices"] == []  # no GPU here
    assert system["versions"]["torch"]
    assert http.get("/healthz").json() == {"status": "ok"}
    metrics = http.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'autotune_jobs{status="failed"} ' in metrics.text
    assert 'autotune_trials_total{outcome="ok"} ' in metrics.text
    assert "autotune_trial_duration_seconds_count " in metrics.text
    assert 'autotune_trial_duration_seconds_bucket{le="2.5"} ' in metrics.text


def test_cancel_a_queued_job_at_once_and_again_harmlessly(http: httpx.Client) -> None:
    job_id = submit(http).json()["id"]
    for _ in range(2):
        response = http.post(f"/v1/jobs/{job_id}/cancel")
        assert response.status_code == 202
        assert response.json()["status"] == "cancelled"


@pytest.mark.postgres
def test_the_api_over_postgresql(tmp_path: Path) -> None:
    for db_url in postgres_schema_url():
        running = start_service(tmp_path, db_url=db_url)
        try:
            with running.client() as http:
                job_id = submit(http, n_trials=2).json()["id"]
                assert http.get("/v1/jobs", params={"status": "queued"}).json()["count"] == 1
                assert http.get(f"/v1/jobs/{job_id}").json()["progress"]["trials_done"] == 0
                assert http.get(f"/v1/jobs/{job_id}/recommendation").status_code == 409
                assert http.post(f"/v1/jobs/{job_id}/cancel").json()["status"] == "cancelled"
                assert 'autotune_jobs{status="cancelled"} 1' in http.get("/metrics").text
        finally:
            running.stop()


# -- every bad input is a 4xx that says what to do -------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"workload": "nope"}, "unknown workload 'nope'; submit one of"),
        ({"workload": "/etc/passwd"}, "unknown workload '/etc/passwd'"),
        ({"workload": "../workloads/tiny.py"}, "files and modules cannot be named directly"),
        ({"workload": "os:system"}, "unknown workload 'os:system'"),
        ({"workload": "builtin:nope"}, "unknown workload 'builtin:nope'"),
        ({"fixed": {"batch_size": 0}}, "batch_size 0 is not positive; use 1 or more"),
        ({"fixed": {"warp_speed": 9}}, "unknown knob 'warp_speed'; known knobs are: batch_size"),
        ({"baseline": {"amp": "int4"}}, "amp takes one of off, fp16, bf16"),
        ({"ranges": {"amp": "1..2"}}, "a lo..hi range needs a numeric knob"),
        ({"effective_batch": 100}, "effective batch 100 is not a multiple of 8"),
        ({"max_memory": "lots"}, "'lots' is not a size; write bytes, 8GB, 512MiB or 80%"),
        ({"device": "tpu"}, "device 'tpu' is not a device; use auto, cpu or cuda:N"),
        ({"n_trials": 0}, "greater than or equal to 1"),
        ({"n_trials": 100_000}, "less than or equal to 1000"),
        ({"trial_timeout_s": 1e9}, "less than or equal to 3600"),
        ({"time_budget_s": -1}, "greater than 0"),
        ({"n_trial": 5}, "Extra inputs are not permitted"),
    ],
)
def test_bad_job_bodies_are_422_with_the_reason(
    http: httpx.Client, body: dict[str, Any], message: str
) -> None:
    response = submit(http, **body)
    assert response.status_code == 422, response.text
    assert message in detail(response)


def test_a_body_that_is_not_json_is_422(http: httpx.Client) -> None:
    response = http.post(
        "/v1/jobs", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 422


def test_an_oversized_body_is_413_before_it_is_parsed(http: httpx.Client) -> None:
    response = submit(http, fixed={f"knob{i}": "x" * 100 for i in range(1000)})
    assert response.status_code == 413
    assert detail(response).startswith("the request body is larger than 65536 bytes")


def chunks() -> Iterator[bytes]:
    yield b'{"workload": "tiny", "fixed": {"x": "'
    for _ in range(100):
        yield b"x" * 1024
    yield b'"}}'


def test_an_oversized_streamed_body_is_413_too(http: httpx.Client) -> None:
    response = http.post("/v1/jobs", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


@pytest.mark.parametrize(
    "path",
    [
        "/v1/jobs/424242",
        "/v1/jobs/424242/trials",
        "/v1/jobs/424242/recommendation",
    ],
)
def test_unknown_jobs_are_404(http: httpx.Client, path: str) -> None:
    response = http.get(path)
    assert response.status_code == 404
    assert detail(response) == "job 424242 does not exist; list the jobs to find its id"
    assert http.post("/v1/jobs/424242/cancel").status_code == 404


@pytest.mark.parametrize("job_id", ["abc", "0", "-3", str(2**40)])
def test_malformed_job_ids_are_422(http: httpx.Client, job_id: str) -> None:
    assert http.get(f"/v1/jobs/{job_id}").status_code == 422


def test_bad_paging_and_status_filters_are_422(http: httpx.Client) -> None:
    assert http.get("/v1/jobs", params={"limit": 0}).status_code == 422
    assert http.get("/v1/jobs", params={"limit": 1000}).status_code == 422
    assert http.get("/v1/jobs", params={"offset": -1}).status_code == 422
    assert http.get("/v1/jobs", params={"status": "sleeping"}).status_code == 422


def test_recommendation_is_409_until_the_job_has_one(service: Service, http: httpx.Client) -> None:
    queued = submit(http).json()["id"]
    response = http.get(f"/v1/jobs/{queued}/recommendation")
    assert response.status_code == 409
    assert detail(response) == (
        f"job {queued} is queued and has no recommendation yet; wait until its status is succeeded"
    )
    failed = store_job(service, status="failed", error="every trial crashed.")
    response = http.get(f"/v1/jobs/{failed}/recommendation")
    assert response.status_code == 409
    assert detail(response) == (
        f"job {failed} failed without a recommendation (every trial "
        "crashed); fix the cause and submit the job again"
    )


def test_cancel_of_a_finished_job_is_409(service: Service, http: httpx.Client) -> None:
    done = store_job(service, status="succeeded")
    response = http.post(f"/v1/jobs/{done}/cancel")
    assert response.status_code == 409
    assert detail(response) == (
        f"job {done} already succeeded and cannot be cancelled; submit a new job to run it again"
    )


# -- auth and where the server listens -------------------------------------------------------


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = start_service(tmp_path_factory.mktemp("auth"), env={"AUTOTUNE_API_TOKEN": TOKEN})
    yield running
    running.stop()


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer wrong-token-of-some-length"},
        {"authorization": f"Basic {TOKEN}"},
        {"authorization": f"Bearer {TOKEN}x"},
    ],
)
def test_with_a_token_every_v1_request_needs_it(guarded: Service, headers: dict[str, str]) -> None:
    with httpx.Client(base_url=guarded.base_url, headers=headers) as client:
        for method, path in [
            ("GET", "/v1/jobs"),
            ("GET", "/v1/workloads"),
            ("POST", "/v1/jobs"),
            ("GET", "/v1/jobs/1"),
        ]:
            response = client.request(method, path, json={"workload": "tiny"})
            assert response.status_code == 401, (method, path)
            assert response.headers["www-authenticate"] == "Bearer"
            assert detail(response).startswith("missing or wrong bearer token; send the header")


def test_the_right_token_is_let_in_and_health_needs_none(guarded: Service) -> None:
    with guarded.client(token=TOKEN) as client:
        assert client.get("/v1/jobs").status_code == 200
        assert client.post("/v1/jobs", json={"workload": "tiny"}).status_code == 202
    assert httpx.get(f"{guarded.base_url}/healthz").status_code == 200


@pytest.mark.slow
def test_serve_refuses_a_public_address_without_a_token(tmp_path: Path) -> None:
    result = subprocess.run(
        [*AUTOTUNE, "serve", "--host", "0.0.0.0", "--db", str(tmp_path / "x.db")],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
    )
    assert result.returncode == 2  # invalid input
    assert result.stderr.strip() == (
        "autotune: error: refusing to serve on 0.0.0.0 without AUTOTUNE_API_TOKEN, since "
        "anyone who reaches it could run jobs; set AUTOTUNE_API_TOKEN or pass "
        "--insecure-allow-remote"
    )


def test_settings_allow_a_public_address_with_a_token_or_the_explicit_flag() -> None:
    assert load_settings(host="0.0.0.0", api_token=TOKEN).host == "0.0.0.0"
    assert load_settings(host="10.1.2.3", insecure_allow_remote=True).api_token is None
    assert load_settings(host="::1").host == "::1"
    with pytest.raises(ConfigError, match="shorter than 16 characters"):
        load_settings(api_token="secret")
    with pytest.raises(ConfigError, match="must be at most half the heartbeat timeout"):
        load_settings(heartbeat_timeout_s=4, heartbeat_interval_s=3)


# -- the CLI's client commands against the same server ---------------------------------------


def test_submit_and_jobs_commands(service: Service) -> None:
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    server = ["--server", service.base_url]

    result = runner.invoke(app, ["submit", "tiny", "--trials", "4", "--fix", "amp=off", *server])
    assert result.exit_code == 0, result.output
    job_id = int(result.output.split()[1])
    assert result.output.startswith(f"job {job_id} queued")

    shown = runner.invoke(app, ["jobs", "show", str(job_id), *server])
    assert '"n_trials": 4' in shown.output and '"amp": "off"' in shown.output
    listed = runner.invoke(app, ["jobs", "list", "--status", "queued", *server])
    assert listed.exit_code == 0 and str(job_id) in listed.output

    refused = runner.invoke(app, ["jobs", "recommendation", str(job_id), *server])
    assert refused.exit_code == 1
    assert str(refused.exception) == (
        f"job {job_id} is queued and has no recommendation yet; wait until its status is succeeded"
    )
    bad = runner.invoke(app, ["submit", "tiny", "--fix", "batch_size=0", *server])
    assert str(bad.exception) == "fixed batch_size='0': batch_size 0 is not positive; use 1 or more"

    cancelled = runner.invoke(app, ["jobs", "cancel", str(job_id), *server])
    assert cancelled.output.strip() == f"job {job_id}: cancelled"
