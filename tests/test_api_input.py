"""Hostile and careless submissions against a real ``autotune serve``: every one answers 4xx
with a sentence, never a 5xx, on SQLite and on PostgreSQL.

No worker runs here: an accepted job stays queued, which the property test checks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from autotune_api.main import _database_error
from conftest_service import Service, postgres_schema_url, start_service
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.exc import DataError, IntegrityError, OperationalError, ProgrammingError
from starlette.requests import Request

from autotune.space import KNOBS
from autotune.tuner import TuneOptions

#: The property test submits hundreds of bodies: the server's rate and queue limits, tested
#: elsewhere, must not answer them before validation does.
UNLIMITED = {"AUTOTUNE_SUBMISSIONS_PER_MINUTE": "100000", "AUTOTUNE_MAX_QUEUED_JOBS": "100000"}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = start_service(tmp_path_factory.mktemp("api-input"), env=UNLIMITED)
    yield running
    running.stop()


@pytest.fixture
def http(service: Service) -> Iterator[httpx.Client]:
    with service.client() as client:
        yield client


def post_raw(http: httpx.Client, body: str) -> httpx.Response:
    """POST a body as written: JSON's NaN, Infinity and huge numbers as Python's json sends."""
    return http.post("/v1/jobs", content=body, headers={"content-type": "application/json"})


def post(http: httpx.Client, body: Any) -> httpx.Response:
    return post_raw(http, json.dumps(body))


def sentence(response: httpx.Response) -> str:
    """The refusal's sentence(s), after checking the body is strict JSON (no NaN, no Infinity)."""
    body = json.loads(response.text, parse_constant=_refuse_constant)
    detail = body["detail"]
    text = detail if isinstance(detail, str) else " | ".join(item["msg"] for item in detail)
    assert text.strip(), response.text
    return text


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"the answer holds {name}, which strict JSON does not allow")


#: Bodies written as JSON text, each refused with the sentence that follows it.
REFUSED = [
    ('{"workload": "tiny", "fixed": {"batch_size": Infinity}}', "batch_size takes a whole number"),
    ('{"workload": "tiny", "fixed": {"batch_size": NaN}}', "batch_size takes a whole number"),
    (
        '{"workload": "tiny", "fixed": {"batch_size": 1' + "0" * 400 + "}}",
        "far out of range for batch_size",
    ),
    (
        '{"workload": "tiny", "baseline": {"num_workers": -1' + "0" * 400 + "}}",
        "far out of range for num_workers",
    ),
    ('{"workload": "tiny", "fixed": {"batch_size": 1000000000000}}', "is more than 1048576"),
    (
        '{"workload": "tiny", "ranges": {"batch_size": {"min": 8, "max": Infinity}}}',
        "min and max take whole numbers",
    ),
    (
        '{"workload": "tiny", "max_memory": "' + "9" * 400 + 'TB"}',
        "max_memory of 402 characters is not a size",
    ),
    ('{"workload": "tiny", "max_memory": 1' + "0" * 400 + "}", "is more than 1 PiB"),
    ('{"workload": "tiny", "max_memory": 1e999}', "max_memory inf is not a whole number"),
    ('{"workload": "tiny", "min_seconds": NaN}', "min_seconds is nan, not a finite number"),
    ('{"workload": "tiny", "time_budget_s": Infinity}', "time_budget_s is inf, not a finite"),
    ('{"workload": "tiny", "n_trials": 1' + "0" * 400 + "}", "less than or equal to 1000"),
    ('{"workload": "tiny", "seed": -Infinity}', "seed is -inf, not a finite number"),
    (
        '{"workload": "tiny", "device_class": "cpu: x\\u0000, 4 cores"}',
        "device_class holds a control character",
    ),
    ('{"workload": "tiny\\ud800"}', "workload holds a control character"),
    ('{"workload": "tiny", "fixed": {"amp": "bf16\\u001b"}}', "holds a control character"),
    (
        '{"workload": "tiny", "fixed": {"amp": "' + "x" * 20_000 + '"}}',
        "a value of 20000 characters is too long",
    ),
    ('{"workload": "' + "x" * 20_000 + '"}', "at most 1024 characters"),
    ('{"workload": "tiny", "device": "' + "c" * 20_000 + '"}', "at most 32 characters"),
]


@pytest.mark.parametrize(("body", "message"), REFUSED, ids=lambda v: str(v)[:40])
def test_bad_numbers_and_text_are_422_with_a_sentence(
    http: httpx.Client, body: str, message: str
) -> None:
    response = post_raw(http, body)
    assert response.status_code == 422, response.text[:500]
    assert message in sentence(response)
    assert len(response.content) < 8000, "a refusal echoes no more than a short part of input"


def test_a_64_kib_max_memory_of_spaces_is_refused_and_the_server_stays_up(
    http: httpx.Client,
) -> None:
    """The size parser is linear (its timing is tested on the parser, in
    test_input_limits.py): the largest body the server reads is refused like a short one."""
    response = post(http, {"workload": "tiny", "max_memory": "8" + " " * 64_000 + "x"})
    assert response.status_code == 422
    assert "max_memory of 64002 characters is not a size" in sentence(response)
    assert http.get("/healthz").status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        '{"workload": "tiny", "seed": 1' + "0" * 5000 + "}",  # past Python's int-text limit
        "[" * 30_000 + "]" * 30_000,  # deeper than the JSON parser recurses
    ],
    ids=["5000-digit-integer", "deep-nesting"],
)
def test_bodies_the_json_parser_refuses_are_4xx_with_a_sentence(
    http: httpx.Client, body: str
) -> None:
    response = post_raw(http, body)
    assert 400 <= response.status_code < 500, response.text[:500]
    assert sentence(response)


# -- the property: no body, however odd, answers 5xx --------------------------------------------

_SPECIAL_TEXT = [
    "8GB",
    "80%",
    "8..64",
    "bf16",
    "null",
    "cpu: x, 4 cores",
    "\x00",
    "\ud800",
    "8" + " " * 3000 + "x",
    "1" + "0" * 400,
    "builtin:image-cnn",
    "tiny",
]
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**500), max_value=10**500),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(st.characters(codec="utf-8", exclude_categories=()), max_size=40),
    st.sampled_from(_SPECIAL_TEXT),
)
_KEYS = st.one_of(st.sampled_from([*KNOBS, "min", "max"]), st.text(max_size=12))
_JUNK = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=12,
)
_FIELDS = [name for name in TuneOptions.model_fields if name != "workload"]
_FIELDS += ["fresh", "not_an_option"]
_SUBMISSIONS = st.one_of(
    st.fixed_dictionaries(
        {"workload": st.sampled_from(["tiny", "builtin:image-cnn"]) | _JUNK},
        optional=dict.fromkeys(_FIELDS, _JUNK),
    ),
    _JUNK,
)


def answers_without_5xx(service: Service, body: Any) -> None:
    with service.client() as http:
        response = post(http, body)
        assert response.status_code < 500, (body, response.text[:500])
        if response.status_code >= 400:
            assert sentence(response)
        else:
            assert response.json()["status"] == "queued", "no worker runs here"


_PROPERTY = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_PROPERTY
@given(body=_SUBMISSIONS)
def test_no_submission_answers_5xx(service: Service, body: Any) -> None:
    answers_without_5xx(service, body)


def test_accepted_jobs_only_wait_in_the_queue(http: httpx.Client) -> None:
    """The property test's accepted jobs are queued, none running: no worker serves here."""
    assert post(http, {"workload": "tiny"}).status_code == 202
    jobs = http.get("/v1/jobs", params={"limit": 100}).json()
    assert jobs["count"] >= 1
    assert {job["status"] for job in jobs["data"]} == {"queued"}


# -- PostgreSQL: refused before the database is asked, never a 503 -------------------------------


@pytest.fixture(scope="module")
def postgres_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    for db_url in postgres_schema_url():
        running = start_service(
            tmp_path_factory.mktemp("api-input-pg"), env=UNLIMITED, db_url=db_url
        )
        yield running
        running.stop()


@pytest.mark.postgres
def test_bad_text_and_numbers_are_422_on_postgresql(postgres_service: Service) -> None:
    with postgres_service.client() as http:
        for body, message in REFUSED:
            response = post_raw(http, body)
            assert response.status_code == 422, (body[:80], response.text[:300])
            assert message in sentence(response)
        accepted = post(http, {"workload": "tiny", "device_class": "cpu: ä ü, 4 cores"})
        assert accepted.status_code == 202, accepted.text


@pytest.mark.postgres
@_PROPERTY
@given(body=_SUBMISSIONS)
def test_no_submission_answers_5xx_on_postgresql(postgres_service: Service, body: Any) -> None:
    answers_without_5xx(postgres_service, body)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (DataError("INSERT", {}, ValueError("NUL byte")), 422),
        (IntegrityError("INSERT", {}, ValueError("duplicate key")), 422),
        (OperationalError("SELECT", {}, ValueError("connection lost")), 503),
        (ProgrammingError("SELECT", {}, ValueError("no such column")), 500),
    ],
    ids=["data", "integrity", "lost-connection", "programming"],
)
def test_a_database_error_answers_by_whose_fault_it_is(error: Exception, code: int) -> None:
    """A value the database refuses is the request's fault; only a database out of reach is
    503 (validation refuses such values first; this is the net under it)."""
    request = Request({"type": "http", "method": "POST", "path": "/v1/jobs", "headers": []})
    response = asyncio.run(_database_error(request, error))
    assert response.status_code == code
    assert json.loads(response.body)["detail"].endswith(("again", "retry", "report it"))
