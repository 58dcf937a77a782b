"""``autotune report``: the job page as one file that opens offline, from a real run."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import conftest_browser
import pytest
from conftest_browser import PLOT_POINTS_JS, screenshot
from conftest_service import AUTOTUNE, TESTS, clean_env
from playwright.sync_api import Browser, Route, expect

from autotune.report import job_page_data, report_page
from autotune.store import Trial, open_database, utcnow

pytestmark = pytest.mark.slow

browser = conftest_browser.browser

#: A failure message that would end the data's <script> element if it were not escaped.
HOSTILE_ERROR = 'RuntimeError: bad "</script><script>window.pwned = 1</script><!-- x'


def autotune(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AUTOTUNE, *args], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A finished job (1) of the tiny workload, plus one failed trial with a hostile message."""
    directory = tmp_path_factory.mktemp("report")
    url = f"sqlite:///{directory / 'jobs.db'}"
    run = autotune(
        [
            "run",
            str(TESTS / "workloads" / "tiny.py"),
            "--trials",
            "3",
            "--db",
            url,
            "--min-seconds",
            "0.3",
            "--min-steps",
            "3",
            "--warmup-steps",
            "1",
            "--confirm-top",
            "1",
            "--confirm-rounds",
            "1",
            "--out",
            str(directory / "best.json"),
        ],
        directory,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    database = open_database(url)
    with database.session() as session:
        number = 1 + max(t.number for t in session.query(Trial).filter_by(job_id=1))
        session.add(
            Trial(
                job_id=1,
                number=number,
                phase="bench",
                config={"batch_size": 8},
                config_key="hostile",
                outcome="error",
                error=HOSTILE_ERROR,
                exit_code=1,
                started_at=utcnow(),
                finished_at=utcnow(),
                duration_s=1.0,
            )
        )
    database.dispose()
    return url


def embedded_data(page: str) -> Any:
    found = re.search(
        r'<script type="application/json" id="autotune-data">(.*?)</script>', page, re.S
    )
    assert found, "the report has no data element"
    return json.loads(found.group(1))


def test_report_holds_the_jobs_data_and_nothing_that_ends_its_script(db_url: str) -> None:
    database = open_database(db_url)
    with database.session() as session:
        data = job_page_data(session, 1)
    database.dispose()
    page = report_page(data)
    assert embedded_data(page) == json.loads(json.dumps(data))
    assert HOSTILE_ERROR not in page  # only its escaped form is in the file
    assert [t["error"] for t in data["trials"]][-1] == HOSTILE_ERROR
    # Every script is inline: nothing is linked from a server or the internet.
    assert not re.search(r'<(script|link)[^>]+(src|href)="(?!data:)', page)


def test_report_command_writes_a_page_that_draws_offline(
    db_url: str, browser: Browser, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    written = autotune(["report", "1", "--db", db_url, "--out", str(out)], tmp_path)
    assert written.returncode == 0, written.stderr
    assert f"wrote {out}" in written.stdout

    context = browser.new_context(viewport={"width": 1300, "height": 900}, offline=True)
    requested: list[str] = []

    def refuse(route: Route) -> None:
        requested.append(route.request.url)
        route.abort()

    context.route(re.compile(r"^(?!file:).*"), refuse)  # the network is cut off
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda m: errors.append(m.text) if "Security Policy" in m.text else None)
    page.goto(out.as_uri())
    conftest_browser.wait_ready(page)
    # Drawn under its own Content-Security-Policy, which refused nothing the page needs.
    assert not errors and not requested, (errors, requested)
    assert page.evaluate("window.pwned") is None

    data = json.loads(page.locator("#autotune-data").text_content() or "")
    trials = data["trials"]
    points = page.evaluate(PLOT_POINTS_JS, ["plot-history", "plot-batch", "plot-memory"])
    assert points["plot-history"]["data"] == len(trials)
    measured = [t for t in trials if t["samples_per_s"] is not None]
    assert points["plot-batch"]["data"] == len(measured) > 0
    assert points["plot-memory"]["drawn"] == len(measured) + 1  # and the recommended point
    expect(page.locator("#trials-table tbody tr")).to_have_count(len(trials))
    expect(page.locator("#trials-table td.reason").last).to_have_text(HOSTILE_ERROR)
    expect(page.locator("#speedup")).to_contain_text(f"{data['recommendation']['speedup']:.2f}x")
    screenshot(page, tmp_path, "report.png")
    # Sorted by throughput either way, the failed trial (no throughput) stays last.
    heading = page.locator("#trials-table thead th", has_text="samples/s")
    index = page.locator("#trials-table thead th").all_inner_texts().index("samples/s")
    cells = page.locator(f"#trials-table tbody td:nth-child({index + 1})")
    for direction in ("ascending", "descending"):
        heading.click()
        expect(heading).to_have_attribute("aria-sort", direction)
        speeds = cells.all_inner_texts()
        assert speeds[-1] == "" and all(speeds[:-1])
        numbers = [float(v.replace(",", "")) for v in speeds[:-1]]
        assert numbers == sorted(numbers, reverse=direction == "descending")
    context.close()


def test_report_policy_runs_the_pages_scripts_and_no_other(
    db_url: str, browser: Browser, tmp_path: Path
) -> None:
    database = open_database(db_url)
    with database.session() as session:
        page_html = report_page(job_page_data(session, 1))
    database.dispose()
    # A script that got into the file some other way than the escaped data.
    injected = page_html.replace("</body>", "<script>window.pwned = 1</script>\n</body>")
    assert injected != page_html
    out = tmp_path / "injected.html"
    out.write_text(injected, encoding="utf-8")

    context = browser.new_context(offline=True)
    page = context.new_page()
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text) if "Security Policy" in m.text else None)
    page.goto(out.as_uri())
    conftest_browser.wait_ready(page)  # the page's own scripts ran
    assert page.evaluate("window.pwned") is None
    assert len(refused) == 1 and "inline script" in refused[0], refused
    context.close()


def test_report_of_a_missing_job_or_folder_is_one_clear_error(db_url: str, tmp_path: Path) -> None:
    missing_job = autotune(["report", "99", "--db", db_url], tmp_path)
    assert missing_job.returncode == 1
    assert missing_job.stderr.strip() == (
        "autotune: error: job 99 does not exist; list the jobs to find its id"
    )
    missing_folder = autotune(
        ["report", "1", "--db", db_url, "--out", str(tmp_path / "nope" / "r.html")], tmp_path
    )
    assert missing_folder.returncode == 2  # invalid input
    assert "the folder" in missing_folder.stderr and "does not exist" in missing_folder.stderr
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_report_data_has_the_apis_shape(db_url: str, tmp_path: Path) -> None:
    """The page reads the report's data and the API's answers alike: same keys, same values."""
    from conftest_service import start_service

    database = open_database(db_url)
    with database.session() as session:
        data = job_page_data(session, 1)
    database.dispose()
    service = start_service(tmp_path / "service", db_url=db_url)
    try:
        with service.client() as client:
            job = client.get("/v1/jobs/1").json()
            trials = client.get("/v1/jobs/1/trials?limit=100").json()["data"]
            recommendation = client.get("/v1/jobs/1/recommendation").json()
    finally:
        service.stop()

    def same(ours: Any, theirs: Any) -> bool:
        if isinstance(ours, str) and isinstance(theirs, str) and "T" in ours:
            try:
                return datetime.fromisoformat(ours) == datetime.fromisoformat(theirs)
            except ValueError:
                pass
        return bool(ours == theirs)

    assert data["recommendation"] == recommendation
    assert len(data["trials"]) == len(trials)
    for ours, theirs in zip(data["trials"], trials, strict=True):
        assert set(ours) <= set(theirs), set(ours) - set(theirs)
        assert all(same(ours[key], theirs[key]) for key in ours), (ours, theirs)
    skip = {"workload"}  # the API names a CLI job's workload by its path, the page by its name
    assert all(same(data["job"][key], job[key]) for key in data["job"] if key not in skip)
