"""The dashboard in a real browser, against a real ``autotune serve`` and real jobs.

The jobs are real: ``autotune run`` measures the tiny workload (a finished job) and the raising
one (a failed job, each trial's error in the workload's words) into the server's database, and
a worker process runs a job submitted over HTTP while the pages watch it (a running job).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conftest_browser
import conftest_service
import httpx
import pytest
from conftest_browser import PLOT_POINTS_JS, open_page, screenshot, wait_ready
from conftest_service import AUTOTUNE, FAST_JOB, TESTS, Service, clean_env, wait_for
from playwright.sync_api import Browser, Page, Route, expect

from autotune.search import study_name_for
from autotune.store import Trial, open_database
from autotune.tuner import Reporter, TuneOptions, create_job, run_job

pytestmark = pytest.mark.slow

browser = conftest_browser.browser

TOKEN = "dashboard-test-token-0123456789"
PLOTS = ("plot-history", "plot-batch", "plot-workers", "plot-memory")
#: The measurement window of the tests' runs (a second or two per trial).
FAST_RUN = [
    "--min-seconds",
    "0.3",
    "--min-steps",
    "3",
    "--warmup-steps",
    "1",
    "--no-profile",
    "--fix",
    "compile=off",
]


def run_cli(args: list[str], directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AUTOTUNE, *args],
        cwd=directory,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dashboard")


@pytest.fixture(scope="module")
def db_url(workdir: Path) -> str:
    """A database holding a finished job (1) and a failed one (2), measured for real."""
    url = f"sqlite:///{workdir / 'jobs.db'}"
    finished = run_cli(
        [
            "run",
            str(TESTS / "workloads" / "tiny.py"),
            "--trials",
            "4",
            "--db",
            url,
            *FAST_RUN,
            "--confirm-top",
            "2",
            "--confirm-rounds",
            "2",
            "--out",
            str(workdir / "best.json"),
        ],
        workdir,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    # `autotune run` says how to see the job's page.
    assert f"see it: autotune report 1 --db {url} --out report.html" in finished.stderr
    failed = run_cli(
        [
            "run",
            str(TESTS / "workloads" / "raises.py"),
            "--trials",
            "2",
            "--db",
            url,
            *FAST_RUN,
            "--confirm-top",
            "1",
            "--confirm-rounds",
            "1",
        ],
        workdir,
    )
    assert failed.returncode == 3, failed.stdout + failed.stderr  # no configuration fits
    return url


@pytest.fixture(scope="module")
def service(workdir: Path, db_url: str) -> Iterator[Service]:
    started = conftest_service.start_service(workdir / "open", db_url=db_url)
    yield started
    started.stop()


@pytest.fixture(scope="module")
def live_job(service: Service) -> int:
    """A job submitted over HTTP, run by a separate worker process while the tests watch."""
    with service.client() as client:
        response = client.post(
            "/v1/jobs", json={"workload": "tiny", **FAST_JOB, "n_trials": 5, "fresh": True}
        )
    assert response.status_code == 202, response.text
    service.start_worker()
    job_id: int = response.json()["id"]
    return job_id


def api(service: Service, path: str) -> Any:
    with service.client(TOKEN) as client:
        response = client.get(path)
    assert response.status_code == 200, response.text
    return response.json()


def trials_of(service: Service, job_id: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    while True:
        page = api(service, f"/v1/jobs/{job_id}/trials?offset={len(rows)}&limit=100")
        rows += page["data"]
        if len(rows) >= page["count"]:
            return rows


def expected_points(trials: list[dict[str, Any]]) -> dict[str, int]:
    """One point per trial in the history; per measured trial in the other plots."""
    measured = [t for t in trials if t["samples_per_s"] is not None]
    return {
        "plot-history": len(trials),
        "plot-batch": sum(t["config"].get("batch_size") is not None for t in measured),
        "plot-workers": sum(t["config"].get("num_workers") is not None for t in measured),
        # A CPU job: host memory is the one that decides what fits.
        "plot-memory": sum(t["peak_host_memory_bytes"] is not None for t in measured),
    }


def plot_points(page: Page, ids: tuple[str, ...] = PLOTS) -> dict[str, dict[str, int]]:
    points: dict[str, dict[str, int]] = page.evaluate(PLOT_POINTS_JS, list(ids))
    return points


def column(page: Page, label: str) -> list[str]:
    index = page.locator("#trials-table thead th").all_inner_texts().index(label)
    return page.locator(f"#trials-table tbody tr td:nth-child({index + 1})").all_inner_texts()


def test_jobs_list_shows_the_jobs_and_filters_them(service: Service, browser: Browser) -> None:
    page = open_page(browser, f"{service.base_url}/")
    rows = page.locator("#jobs-table tbody tr")
    expect(rows.first).to_be_visible()
    statuses = dict(
        zip(
            rows.evaluate_all("rows => rows.map(r => r.dataset.job)"),
            rows.evaluate_all("rows => rows.map(r => r.dataset.status)"),
            strict=True,
        )
    )
    assert statuses["1"] == "succeeded" and statuses["2"] == "failed"
    assert page.locator("tr[data-job='1'] .speedup-cell").inner_text().endswith("x")
    page.select_option("#status-filter", "failed")
    expect(page.locator("#jobs-table tbody tr")).to_have_count(1)
    expect(page.locator("#jobs-table tbody tr").first).to_have_attribute("data-job", "2")
    assert "status=failed" in page.url


def test_job_page_draws_each_plot_with_one_point_per_trial(
    service: Service, browser: Browser, tmp_path: Path
) -> None:
    trials = trials_of(service, 1)
    recommendation = api(service, "/v1/jobs/1/recommendation")
    page = open_page(browser, f"{service.base_url}/jobs/1")
    points = plot_points(page)
    for plot, count in expected_points(trials).items():
        assert count > 0
        assert points[plot]["data"] == count, (plot, points[plot], count)
        # What plotly drew: every trial's marker, plus the recommended point where there is one.
        assert points[plot]["drawn"] == count + points[plot]["highlighted"], (plot, points)
    assert all(points[plot]["highlighted"] == 1 for plot in PLOTS[1:])
    expect(page.locator("#speedup")).to_contain_text(f"{recommendation['speedup']:.2f}x")
    expect(page.locator("#verdict")).to_have_text(recommendation["verdict"])
    expect(page.locator("#diagnosis")).to_have_text(recommendation["diagnosis"])
    exports = page.locator("#recommendation details pre").first.inner_text()
    assert exports.strip().startswith("{") and '"batch_size"' in exports
    assert page.locator("#capacity").is_hidden()  # a --no-profile job
    screenshot(page, tmp_path, "job-page.png")


def test_copy_buttons_copy_the_exports(service: Service, browser: Browser) -> None:
    recommendation = api(service, "/v1/jobs/1/recommendation")
    context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    page = context.new_page()
    page.goto(f"{service.base_url}/jobs/1")
    wait_ready(page)
    buttons = page.locator("#recommendation button[data-export]")
    expected = [*recommendation["exports"].values(), recommendation]
    assert buttons.count() == len(expected)
    for index in (0, len(expected) - 1):  # the DataLoader's arguments, and the whole JSON
        buttons.nth(index).click()
        expect(buttons.nth(index)).to_have_text("Copied")
        assert json.loads(page.evaluate("navigator.clipboard.readText()")) == expected[index]
    context.close()


def test_trial_table_sorts_and_shows_each_failure_in_the_workloads_words(
    service: Service, browser: Browser
) -> None:
    page = open_page(browser, f"{service.base_url}/jobs/1")
    numbers = [int(n) for n in column(page, "#")]
    assert numbers == sorted(numbers) and len(numbers) == len(trials_of(service, 1))
    header = page.locator("#trials-table thead th", has_text="samples/s")
    header.click()
    speeds = [float(v.replace(",", "")) for v in column(page, "samples/s") if v]
    assert speeds == sorted(speeds) and len(set(speeds)) > 1
    expect(page.locator("#trials-table thead th", has_text="samples/s")).to_have_attribute(
        "aria-sort", "ascending"
    )
    page.locator("#trials-table thead th", has_text="samples/s").click()
    speeds = [float(v.replace(",", "")) for v in column(page, "samples/s") if v]
    assert speeds == sorted(speeds, reverse=True)

    failed = open_page(browser, f"{service.base_url}/jobs/2")
    reasons = column(failed, "reason")
    assert reasons and all("shape mismatch in my_layer: expected 16 features" in r for r in reasons)
    expect(failed.locator("#job-error")).to_contain_text("no configuration could be measured")
    expect(failed.locator("#recommendation")).to_contain_text("None yet")


def test_pages_update_while_the_job_runs_without_a_reload(
    service: Service, live_job: int, browser: Browser
) -> None:
    job_page = open_page(browser, f"{service.base_url}/jobs/{live_job}")
    jobs_page = open_page(browser, f"{service.base_url}/")
    for page in (job_page, jobs_page):
        page.evaluate("window.notReloaded = true")
    first = int(job_page.evaluate("document.body.dataset.trials"))
    progress = jobs_page.locator(f"tr[data-job='{live_job}'] .progress")
    first_progress = progress.inner_text()

    def grown() -> bool:
        return int(job_page.evaluate("document.body.dataset.trials")) > first

    wait_for(grown, 180, f"a trial of job {live_job} to appear on its page\n{service.logs()}")
    expect(progress).not_to_have_text(first_progress, timeout=30_000)
    wait_for(
        lambda: job_page.evaluate("document.body.dataset.status") == "succeeded",
        300,
        f"job {live_job} to succeed on its page\n{service.logs()}",
    )
    for page in (job_page, jobs_page):
        assert page.evaluate("window.notReloaded") is True
    expect(job_page.locator("#speedup")).to_be_visible()
    points = plot_points(job_page)
    for plot, count in expected_points(trials_of(service, live_job)).items():
        assert points[plot]["data"] == count, (plot, points[plot], count)


def test_compare_view_shows_two_jobs_side_by_side(
    service: Service, live_job: int, browser: Browser
) -> None:
    wait_for(
        lambda: api(service, f"/v1/jobs/{live_job}")["status"] == "succeeded",
        300,
        f"job {live_job} to succeed\n{service.logs()}",
    )
    page = open_page(browser, f"{service.base_url}/")
    for job_id in (1, live_job):
        page.check(f"input[data-select='{job_id}']")
    page.click("#compare-button")
    wait_ready(page)
    assert page.url.endswith(f"/compare?jobs=1,{live_job}")
    expect(page.locator("#compare-columns .card")).to_have_count(2)
    headings = page.locator("#compare-table thead th").all_inner_texts()
    assert headings[1].startswith("job 1") and headings[2].startswith(f"job {live_job}")
    measured = sum(
        t["samples_per_s"] is not None and "batch_size" in t["config"]
        for job in (1, live_job)
        for t in trials_of(service, job)
    )
    assert plot_points(page, ("plot-compare",))["plot-compare"]["data"] == measured


@pytest.fixture(scope="module")
def guarded(workdir: Path, db_url: str) -> Iterator[Service]:
    """A second server on the same database, with a token."""
    started = conftest_service.start_service(
        workdir / "guarded", db_url=db_url, env={"AUTOTUNE_API_TOKEN": TOKEN}
    )
    yield started
    started.stop()


def test_with_a_token_the_page_asks_for_it_and_shows_no_data_without_it(
    guarded: Service, browser: Browser
) -> None:
    context = browser.new_context()
    page = context.new_page()
    sent: list[tuple[str, str | None]] = []
    page.on("request", lambda r: sent.append((r.url, r.headers.get("authorization"))))
    page.goto(f"{guarded.base_url}/jobs/1")
    expect(page.locator("#token-prompt")).to_be_visible(timeout=30_000)
    assert page.locator("#trials-table").count() == 0
    assert page.locator(".plot").count() == 0
    assert "tiny" not in page.locator("main").inner_text()

    page.fill("#token-input", "wrong-token-of-twenty-chars")
    page.click("#token-prompt button")
    expect(page.locator("#token-error")).to_be_visible()
    assert page.locator("#trials-table").count() == 0

    page.fill("#token-input", TOKEN)
    page.click("#token-prompt button")
    wait_ready(page)
    expect(page.locator("#job-title")).to_have_text("Job 1: tiny")
    assert page.evaluate("sessionStorage.getItem('autotune.token')") == TOKEN
    # Kept for the tab: the jobs list opens without asking again.
    page.goto(f"{guarded.base_url}/")
    wait_ready(page)
    expect(page.locator("tr[data-job='1']")).to_be_visible()
    assert all(TOKEN not in url for url, _ in sent), "the token went into a URL"
    api_calls = [header for url, header in sent if "/v1/" in url]
    assert api_calls and api_calls[-1] == f"Bearer {TOKEN}"
    context.close()


def test_optuna_dashboard_finds_the_jobs_study(service: Service, workdir: Path) -> None:
    port = conftest_service.free_port()
    log = workdir / "optuna-dashboard.log"
    executable = Path(AUTOTUNE[0]).with_name("optuna-dashboard")
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(executable), service.db_url, "--host", "127.0.0.1", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def studies() -> list[dict[str, Any]] | None:
            if process.poll() is not None:
                raise AssertionError(f"optuna-dashboard exited:\n{log.read_text()}")
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/api/studies", timeout=5)
            except httpx.HTTPError:
                return None
            found: list[dict[str, Any]] = answer.json()["study_summaries"]
            return found

        summaries = wait_for(studies, 60, "optuna-dashboard to answer /api/studies")
        names = {s["study_name"]: s["study_id"] for s in summaries}
        expected = study_name_for(1)
        assert expected in names, names
        detail = httpx.get(
            f"http://127.0.0.1:{port}/api/studies/{names[expected]}", timeout=10
        ).json()
        # Every measured search trial is in the study with the throughput autotune told it. The
        # study may hold more: a proposal that repeats a measured configuration is told too.
        told = [value for t in detail["trials"] for value in (t.get("values") or [])]
        measured = [
            t["samples_per_s"]
            for t in trials_of(service, 1)
            if t["phase"] != "confirm" and t["outcome"] == "ok" and not t["pruned"]
        ]
        assert measured and len(detail["trials"]) >= len(measured)
        for value in measured:
            assert any(abs(v - value) <= 1e-6 * value for v in told), (value, told)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_token_stored_while_a_request_without_one_is_on_its_way_is_kept(
    guarded: Service, browser: Browser
) -> None:
    """The refusal of a request that carried no token does not forget the one stored since."""
    context = browser.new_context()
    page = context.new_page()
    held: list[Route] = []

    def jobs_list(url: str) -> bool:
        return "/v1/jobs?" in url

    def hold(route: Route) -> None:
        held.append(route)

    page.route(jobs_list, hold)
    page.goto(f"{guarded.base_url}/")
    for _ in range(600):
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the jobs list never asked for its jobs"
    page.evaluate(f"sessionStorage.setItem('autotune.token', '{TOKEN}')")
    held[0].continue_()  # the request as sent, without a token: the server answers 401
    expect(page.locator("#token-prompt")).to_be_visible(timeout=30_000)
    expect(page.locator("#token-error")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('autotune.token')") == TOKEN
    page.unroute(jobs_list)
    page.reload()
    wait_ready(page)
    expect(page.locator("tr[data-job='1']")).to_be_visible()
    context.close()


def test_a_failed_poll_keeps_the_page_and_says_so(guarded: Service, browser: Browser) -> None:
    """Runs last: it stops the guarded server under an open jobs list."""
    page = browser.new_context().new_page()
    page.goto(f"{guarded.base_url}/")
    # The page has had its 401 (no token yet) before the tab is given one.
    expect(page.locator("#token-prompt")).to_be_visible(timeout=30_000)
    page.evaluate(f"sessionStorage.setItem('autotune.token', '{TOKEN}')")
    page.reload()
    wait_ready(page)
    rows = page.locator("#jobs-table tbody tr").count()
    assert rows >= 2
    guarded.server.stop()
    expect(page.locator("#bar-note")).to_contain_text("not updated", timeout=30_000)
    expect(page.locator("#jobs-table tbody tr")).to_have_count(rows)


def test_pages_link_their_assets_which_are_cacheable(service: Service) -> None:
    with service.client() as client:
        shell = client.get("/jobs/1")
        assert shell.status_code == 200 and shell.headers["content-type"].startswith("text/html")
        links = re.findall(r'(?:src|href)="(/assets/[^"]+)"', shell.text)
        assert len(links) == 3, links  # plotly.js, the page's script and its stylesheet
        for link in links:
            answer = client.get(link)
            assert answer.status_code == 200, link
            assert answer.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert client.get("/assets/plotly-0.0.0.min.js").status_code == 404
        assert client.get("/jobs/0").status_code == 422
        # The shell holds no job data: the script reads it through /v1, with the token.
        assert "tiny" not in shell.text


@pytest.fixture(scope="module")
def moved_job(db_url: str, workdir: Path) -> int:
    """A job whose first trial ran on every core, resumed by `autotune run --resume` on one:
    its first trial stays in measurement set 1, the rest of the job is measured as set 2."""

    class StopAfterFirstTrial(Reporter):
        def trial_finished(self, trial: Trial) -> None:
            cancel.set()

    cancel = threading.Event()
    database = open_database(db_url)
    try:
        options = TuneOptions(
            workload=str(TESTS / "workloads" / "tiny.py"),
            n_trials=2,
            device="cpu",
            confirm_top=1,
            confirm_rounds=1,
            warmup_steps=1,
            min_steps=3,
            min_seconds=0.3,
        )
        job_id = create_job(database, options, status="running")
        run_job(database, job_id, StopAfterFirstTrial(), cancel=cancel)
    finally:
        database.dispose()
    first_core = min(os.sched_getaffinity(0))
    resumed = subprocess.run(
        [
            *AUTOTUNE,
            "run",
            str(TESTS / "workloads" / "tiny.py"),
            "--resume",
            "--job",
            str(job_id),
            "--db",
            db_url,
            "--out",
            str(workdir / "moved.json"),
        ],
        cwd=workdir,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=lambda: os.sched_setaffinity(0, {first_core}),
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "measuring anew as set 2" in " ".join(resumed.stderr.split())  # rich wraps it
    return job_id


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="needs two CPU cores to resume on fewer"
)
def test_trials_of_an_earlier_measurement_set_are_listed_marked_and_not_plotted(
    service: Service,
    moved_job: int,
    browser: Browser,
) -> None:
    trials = trials_of(service, moved_job)
    assert api(service, f"/v1/jobs/{moved_job}")["measurement_set"] == 2
    earlier = [t for t in trials if t["measurement_set"] == 1]
    current = [t for t in trials if t["measurement_set"] == 2]
    assert earlier and current
    page = open_page(browser, f"{service.base_url}/jobs/{moved_job}")
    assert len(column(page, "#")) == len(trials)
    assert page.locator("#trials-table tbody tr.earlier-set").count() == len(earlier)
    marked = [v for v in column(page, "set") if v != "2"]
    assert marked == ["1 (earlier hardware)"] * len(earlier)
    expect(page.locator("#earlier-sets")).to_contain_text(f"{len(earlier)} trials ran on other")
    points = plot_points(page)
    for plot, count in expected_points(current).items():
        assert points[plot]["data"] == count, (plot, points[plot], count)
