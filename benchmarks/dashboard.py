"""``python -m benchmarks.dashboard``: how fast the job page loads with a 500-trial job.

A job of 500 trials is written through the store (synthetic rows: configurations over batch
size, workers and precision, throughputs from a smooth model with noise, one failure in ten
with its message, confirmation rounds at the end), then opened in Debian's headless chromium:

- the service's job page, cold (a new browser profile: plotly.js is fetched) and warm (the
  same profile again: plotly.js comes from the cache). Its script reads the job through /v1 (5
  pages of trials), draws four plots and the table;
- the report file that ``autotune report`` writes, opened from disk;
- re-sorting the 500-row table.

Load time is navigation start to the page's ``autotune-ready`` mark (everything drawn). Each
figure is the median of ``--repeats`` loads. Prints a Markdown section for RESULTS.md.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from playwright.sync_api import Browser, sync_playwright
from plotly.offline import get_plotlyjs

from autotune.report import job_page_data, report_page
from autotune.store import Database, Job, Trial, open_database, utcnow

CHROMIUM = "/usr/bin/chromium"
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
READY_MS_JS = "performance.getEntriesByName('autotune-ready')[0].startTime"
SORT_MS_JS = """() => {
  const heading = [...document.querySelectorAll('#trials-table thead th')]
    .find(th => th.textContent.startsWith('samples/s'));
  const start = performance.now();
  heading.click();
  return performance.now() - start;
}"""


def _trial(number: int, rng: random.Random, phase: str) -> Trial:
    batch = rng.choice([8, 16, 32, 64, 128, 256, 512])
    workers = rng.randrange(0, 17)
    amp = rng.choice(["off", "bf16"])
    config = {
        "batch_size": batch,
        "num_workers": workers,
        "amp": amp,
        "pin_memory": False,
        "prefetch_factor": 2 if workers else None,
        "persistent_workers": workers > 0,
        "channels_last": False,
        "grad_accum_steps": 1,
    }
    speed = 400 * min(workers + 1, 8) * (1 + batch / 256) * (1.3 if amp == "bf16" else 1)
    failed = rng.random() < 0.1
    memory = int(2e8 + batch * 4e6 + workers * 6e7)
    started = utcnow()
    return Trial(
        number=number,
        phase=phase,
        config=config,
        config_key=f"{number}",
        started_at=started,
        outcome="oom" if failed else "ok",
        within_budget=not failed,
        error=(
            f"out of memory: the process tree used {memory / 2**30:.1f} GiB, over the "
            "budget of 4.0 GiB"
        )
        if failed
        else None,
        samples_per_s=None if failed else speed * rng.uniform(0.9, 1.1),
        step_time_median_ms=None if failed else 1000 * batch / speed,
        step_time_p90_ms=None if failed else 1100 * batch / speed,
        data_wait_fraction=None if failed else rng.uniform(0, 0.8),
        peak_memory_bytes=memory,
        peak_host_memory_bytes=memory,
        losses_finite=not failed,
        steps=200,
        warmup_steps=5,
        window_s=2.0,
        finished_at=started,
        duration_s=4.0,
    )


def write_job(database: Database, trials: int) -> int:
    """One succeeded job with ``trials`` stored trials; returns its id."""
    rng = random.Random(0)
    rows = [_trial(n + 1, rng, "search" if n < trials - 12 else "confirm") for n in range(trials)]
    best = max((r for r in rows if r.samples_per_s), key=lambda r: r.samples_per_s or 0)
    baseline = rows[0]
    metrics = {
        "samples_per_s": best.samples_per_s,
        "step_time_ms": best.step_time_median_ms,
        "peak_memory_bytes": best.peak_memory_bytes,
        "peak_host_memory_bytes": best.peak_host_memory_bytes,
        "data_wait_fraction": best.data_wait_fraction,
    }
    recommendation = {
        "schema": "autotune.recommendation/v1",
        "workload": "synthetic-500",
        "config": best.config,
        "metrics": metrics,
        "baseline": {
            "config": baseline.config,
            "metrics": {"samples_per_s": baseline.samples_per_s},
        },
        "speedup": (best.samples_per_s or 1) / (baseline.samples_per_s or 1),
        "speedup_spread": None,
        "within_noise": False,
        "verdict": "synthetic job for the page-load benchmark",
        "diagnosis": "synthetic",
        "exports": {"dataloader": {"batch_size": best.config["batch_size"]}},
        "memory_budget_bytes": 4 * 2**30,
    }
    with database.session() as session:
        job = Job(
            workload="synthetic-500",
            workload_name="synthetic-500",
            status="succeeded",
            options={"n_trials": trials - 12, "device": "cpu"},
            device={"type": "cpu", "name": "benchmark CPU"},
            recommendation=recommendation,
            started_at=utcnow(),
            finished_at=utcnow(),
        )
        job.trials = rows
        session.add(job)
        session.flush()
        return job.id


@contextmanager
def serve(db_url: str, directory: Path) -> Iterator[str]:
    port = 8000 + random.Random().randrange(1000, 9000)
    log = (directory / "server.log").open("wb")
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from autotune.cli import main; main()",
            "serve",
            "--no-worker",
            "--port",
            str(port),
            "--db",
            db_url,
            "--log-level",
            "warning",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def load_ms(browser: Browser, url: str, repeats: int, warm: bool) -> tuple[float, float]:
    """Median load time (ms) and median table sort time (ms, NaN without a table)."""
    loads, sorts = [], []
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    if warm:  # one load first, so that plotly.js is in this profile's cache
        context.new_page().goto(url)
    for _ in range(repeats):
        page = context.new_page() if warm else browser.new_context().new_page()
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']", state="attached", timeout=120_000)
        loads.append(float(page.evaluate(READY_MS_JS)))
        has_table = page.locator("#trials-table").count() > 0
        sorts.append(float(page.evaluate(SORT_MS_JS)) if has_table else float("nan"))
        page.close()
    context.close()
    return statistics.median(loads), statistics.median(sorts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dashboard")
    parser.add_argument(
        "--trials",
        type=int,
        action="append",
        help="trials of a job (repeatable; default: 20 and 500)",
    )
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    sizes = args.trials or [20, 500]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder)
        db_url = f"sqlite:///{directory / 'jobs.db'}"
        database = open_database(db_url)
        jobs = {size: write_job(database, size) for size in sizes}
        reports = {}
        for size, job_id in jobs.items():
            started = time.perf_counter()
            with database.session() as session:
                page = report_page(job_page_data(session, job_id))
            reports[size] = (
                directory / f"report-{size}.html",
                time.perf_counter() - started,
                len(page.encode()),
            )
            reports[size][0].write_text(page, encoding="utf-8")
        database.dispose()
        # The floor: a page that only loads plotly.js from disk and marks itself drawn.
        floor = directory / "plotly-only.html"
        floor.write_text(
            f"<!doctype html><body><script>{get_plotlyjs()}</script><script>"
            "performance.mark('autotune-ready'); document.body.dataset.ready = '1'"
            "</script></body>",
            encoding="utf-8",
        )
        with sync_playwright() as playwright, serve(db_url, directory) as base:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            rows.append(
                (
                    0,
                    "plotly.js alone, from disk (the floor)",
                    load_ms(browser, floor.as_uri(), args.repeats, warm=False),
                )
            )
            for size, job_id in jobs.items():
                url = f"{base}/jobs/{job_id}"
                rows.append(
                    (
                        size,
                        "service, cold cache (plotly.js fetched)",
                        load_ms(browser, url, args.repeats, warm=False),
                    )
                )
                rows.append(
                    (size, "service, warm cache", load_ms(browser, url, args.repeats, warm=True))
                )
                rows.append(
                    (
                        size,
                        "report file, from disk",
                        load_ms(browser, reports[size][0].as_uri(), args.repeats, False),
                    )
                )
            browser.close()
    print("## 6. Dashboard: loading a job's page\n")
    print(
        f"Median of {args.repeats} loads in headless chromium, from navigation start to the "
        "page drawn (four plots and the table); `python -m benchmarks.dashboard`.\n"
    )
    print("| trials | page | load (ms) | re-sort the table (ms) |\n|---:|---|---:|---:|")
    for size, name, (load, sort) in rows:
        print(f"| {size or ''} | {name} | {load:.0f} | {'' if sort != sort else f'{sort:.1f}'} |")
    print()
    for size, (_, seconds, length) in reports.items():
        print(
            f"Writing the report of {size} trials: {seconds * 1000:.0f} ms, "
            f"{length / 2**20:.1f} MiB."
        )


if __name__ == "__main__":
    main()
