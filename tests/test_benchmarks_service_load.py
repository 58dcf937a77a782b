"""``python -m benchmarks.service_load`` runs end to end, tiny: a real ``autotune serve`` with a
worker tuning a job, a few clients for a few seconds, no 5xx and no trial lost or repeated.

Latency is the benchmark's to report (benchmarks/RESULTS.md#service-under-load), not asserted
here: a shared test machine's timing is noise.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest_service import POSTGRES_URL

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
KINDS = {"healthz", "list_jobs", "read_job", "read_trials", "submit", "bad_body"}


@pytest.mark.parametrize(
    "db_args",
    [
        pytest.param([], id="sqlite"),
        pytest.param(["--db", POSTGRES_URL], marks=pytest.mark.postgres, id="postgresql"),
    ],
)
def test_a_short_load_gets_no_5xx_and_loses_or_repeats_nothing(db_args: list[str]) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.service_load", "--clients", "5", "--seconds", "5"]
        + ["--workload", "builtin:slow-storage", *db_args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    summary_line, *table = completed.stdout.splitlines()
    summary = json.loads(summary_line)
    assert any(line.startswith("| healthz |") for line in table)

    assert summary["database"] == ("postgresql" if db_args else "sqlite")
    assert summary["requests"] > 0 and set(summary["by_kind"]) == KINDS
    assert summary["server_errors"] == 0, summary["statuses"]
    assert summary["unanswered"] == 0, summary["unanswered_by_error"]
    assert summary["unexpected"] == 0, summary["by_kind"]
    for kind in summary["by_kind"].values():
        assert set(kind) >= {"requests", "statuses", "unexpected", "p50_ms", "p99_ms", "max_ms"}
    assert summary["healthz_probe"]["requests"] > 0 and summary["healthz_probe"]["failed"] == 0

    store = summary["store"]
    assert store["job_status"] in {"running", "succeeded"}
    assert store["duplicate_trials"] == 0 and store["missing_trial_numbers"] == 0
    assert store["trials_seen_but_not_stored_as_seen"] == 0
    assert store["submission_ids_answered_twice"] == 0 and store["submissions_not_stored"] == 0
    assert set(summary["machine"]) >= {"cpu_model", "cores", "date", "commit"}
