"""The profile on the job page and in the API: where the ceiling is, and how well it predicted.

Two real jobs measure the tiny workload, one with a (short) profile and one without; a real
``autotune serve`` shows them to a real browser.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conftest_browser
import conftest_service
import pytest
from conftest_browser import open_page, screenshot
from conftest_service import AUTOTUNE, TESTS, Service, clean_env
from playwright.sync_api import Browser

pytestmark = pytest.mark.slow

browser = conftest_browser.browser

RUN = [
    "run",
    str(TESTS / "workloads" / "tiny.py"),
    "--trials",
    "4",
    "--min-seconds",
    "0.3",
    "--min-steps",
    "3",
    "--warmup-steps",
    "1",
    "--fix",
    "compile=off",
    "--confirm-top",
    "1",
    "--confirm-rounds",
    "1",
]

#: In the page: the points each capacity plot holds, by trace kind (``meta``).
CAPACITY_POINTS_JS = """
() => Object.fromEntries(["plot-capacity", "plot-loader", "plot-predicted"].map(id => {
  const counts = {};
  for (const trace of document.getElementById(id).data || []) {
    counts[trace.meta || "other"] = (counts[trace.meta || "other"] || 0) + trace.x.length;
  }
  return [id, counts];
}))
"""

#: In the page: the job's predictions, as (x, y) pairs of the hollow trace.
SCALED_POINTS_JS = """
() => {
  const trace = document.getElementById("plot-predicted").data.find(t => t.meta === "scaled");
  return trace.x.map((x, i) => [x, trace.y[i]]);
}
"""


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """Job 1 measured with a profile, job 2 with ``--no-profile``."""
    workdir = tmp_path_factory.mktemp("capacity")
    url = f"sqlite:///{workdir / 'jobs.db'}"
    for extra in (["--profile-seconds", "4"], ["--no-profile"]):
        done = subprocess.run(
            [*AUTOTUNE, *RUN, "--db", url, *extra],
            cwd=workdir,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    started = conftest_service.start_service(workdir / "serve", db_url=url)
    yield started
    started.stop()


def get(service: Service, path: str) -> Any:
    with service.client() as client:
        response = client.get(path)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_job_shows_its_profile_in_the_api_and_none_without_one(service: Service) -> None:
    profile = get(service, "/v1/jobs/1")["profile"]
    assert profile is not None and profile["step"] and profile["loader"]
    # The API and the recommendation JSON show one profile, the same way.
    assert profile == get(service, "/v1/jobs/1/recommendation")["profile"]
    assert get(service, "/v1/jobs/2")["profile"] is None
    # The job list stays small: no profiles there.
    assert all("profile" not in job for job in get(service, "/v1/jobs")["data"])


def test_the_job_page_draws_the_ceilings_and_the_predictions(
    service: Service, browser: Browser, tmp_path: Path
) -> None:
    profile = get(service, "/v1/jobs/1")["profile"]
    trials = get(service, "/v1/jobs/1/trials?limit=100")["data"]
    page = open_page(browser, f"{service.base_url}/jobs/1")
    assert page.locator("#capacity").is_visible()
    points = page.evaluate(CAPACITY_POINTS_JS)
    # One point per batch size the step alone ran at, per worker count the loader ran with.
    assert points["plot-capacity"]["step"] == sum(
        p["samples_per_s"] is not None for p in profile["step"]
    )
    assert points["plot-loader"]["loader"] == len(profile["loader"])
    # The trials under the ceilings, and each measured trial against its prediction.
    measured = [t for t in trials if t["samples_per_s"] is not None]
    assert points["plot-capacity"]["trials"] == len(measured)
    predicted = [t for t in measured if t["predicted_samples_per_s"] is not None]
    assert predicted, "the profiled job's trials carry their predictions"
    assert points["plot-predicted"]["predicted"] == len(predicted)
    # The job's prediction beside it, for each trial that had runs of other configurations
    # before it (the first trial has none), at the profile's times the stored scale.
    scaled = [t for t in predicted if t["prediction_scale"] is not None]
    assert scaled and len(scaled) < len(predicted), "the first trial has no scale, later ones do"
    assert points["plot-predicted"]["scaled"] == len(scaled)
    drawn = page.evaluate(SCALED_POINTS_JS)
    expected = [
        (t["predicted_samples_per_s"] * t["prediction_scale"], t["samples_per_s"]) for t in scaled
    ]
    assert [v for pair in drawn for v in pair] == pytest.approx(
        [v for pair in expected for v in pair]
    )
    screenshot(page, tmp_path, "job-capacity.png")


def test_a_job_without_a_profile_hides_the_section(service: Service, browser: Browser) -> None:
    page = open_page(browser, f"{service.base_url}/jobs/2")
    assert page.locator("#capacity").is_hidden()
