"""Property-based run of the OpenAPI schema (schemathesis) against a real server.

Bounded: a few dozen generated requests per operation. No answer may be a 5xx, use a status
the schema does not document, or break the schema it documents.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest_service import Service, start_service
from hypothesis import HealthCheck, settings

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = pytest.mark.slow

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = start_service(tmp_path_factory.mktemp("schema"))
    with running.client() as http:  # something to find for the generated ids
        for _ in range(3):
            http.post("/v1/jobs", json={"workload": "tiny"})
    yield running
    running.stop()


@pytest.fixture(scope="module")
def api_schema(service: Service) -> object:
    return schemathesis.openapi.from_url(f"{service.base_url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_server_error_and_no_schema_violation(case: object) -> None:
    case.call_and_validate(checks=CHECKS)  # type: ignore[attr-defined]
