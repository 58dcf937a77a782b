"""The job page's data read from the store, on SQLite and on PostgreSQL."""

from __future__ import annotations

import json

import conftest_service
import pytest
from conftest_service import add_job

from autotune.report import job_page_data, report_page
from autotune.service import JobNotFoundError
from autotune.store import Database, Trial, utcnow

database_url = conftest_service.database_url
database = conftest_service.database


def test_job_page_data_lists_every_trial_in_order_on_both_backends(database: Database) -> None:
    job_id = add_job(database, status="running", workload_name="tiny")
    with database.session() as session:
        # Stored out of order, as a resumed job can: the page shows them by number.
        for number in (3, 1, 2):
            failed = number == 2
            session.add(
                Trial(
                    job_id=job_id,
                    number=number,
                    phase="search",
                    config={"batch_size": 8 * number},
                    config_key=str(number),
                    outcome="error" if failed else "ok",
                    error="ValueError: my dataset broke" if failed else None,
                    samples_per_s=None if failed else 100.0 * number,
                    started_at=utcnow(),
                    peak_host_memory_bytes=2**28,
                )
            )
    with database.session() as session:
        data = job_page_data(session, job_id)
    assert [t["number"] for t in data["trials"]] == [1, 2, 3]
    assert data["trials"][1]["error"] == "ValueError: my dataset broke"
    assert data["job"]["workload"] == "tiny" and data["job"]["status"] == "running"
    assert data["job"]["progress"]["trials_done"] == 3
    assert data["job"]["progress"]["best"]["number"] == 3
    assert data["recommendation"] is None
    assert json.loads(json.dumps(data)) == data  # plain JSON: timestamps as ISO strings
    assert 'id="autotune-data"' in report_page(data)


def test_job_page_data_of_a_missing_job_says_so(database: Database) -> None:
    with database.session() as session, pytest.raises(JobNotFoundError, match="does not exist"):
        job_page_data(session, 12345)
