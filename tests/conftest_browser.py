"""A real browser for the dashboard's tests: Debian's chromium, driven by Playwright.

Nothing here downloads a browser: Playwright launches ``/usr/bin/chromium`` (``.ci/run``
installs the ``chromium`` package), headless. Test modules import the helpers and take the
fixtures by assignment (``browser = conftest_browser.browser``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Screenshots are also copied here (git-ignored), to look at after a run.
TEST_OUTPUT = Path(__file__).parent.parent / "test-output"
#: Seconds a page may take to draw (plotly.js is 4.8 MB of script, and two cores are shared).
READY_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing; install Debian's chromium package "
            "(apt-get install chromium), as .ci/run does"
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def open_page(browser: Browser, url: str) -> Page:
    """A fresh tab (its own sessionStorage) at ``url``, once the page's script has drawn it."""
    page = browser.new_context(viewport={"width": 1300, "height": 900}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    wait_ready(page)
    assert not errors, f"the page's script failed: {errors}"
    return page


def wait_ready(page: Page) -> None:
    page.wait_for_selector("body[data-ready='1']", state="attached", timeout=READY_TIMEOUT_MS)


def screenshot(page: Page, directory: Path, name: str) -> Path:
    """A full-page screenshot in ``directory``, with a copy under test-output/."""
    path = directory / name
    page.screenshot(path=str(path), full_page=True)
    TEST_OUTPUT.mkdir(exist_ok=True)
    shutil.copy(path, TEST_OUTPUT / name)
    return path


#: In the page: how many trial points each plot holds, and how many markers plotly drew.
PLOT_POINTS_JS = """
ids => Object.fromEntries(ids.map(id => {
  const element = document.getElementById(id);
  const traces = (element.data || []).filter(trace => trace.meta === "trials");
  return [id, {
    data: traces.reduce((sum, trace) => sum + trace.x.length, 0),
    drawn: element.querySelectorAll(".scatterlayer .trace .points path.point").length,
    highlighted: (element.data || []).filter(trace => trace.meta === "recommended").length,
  }];
}))
"""
