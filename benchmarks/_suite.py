"""The whole suite: measure every workload, then write one report."""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path

from autotune.store import open_database
from benchmarks import _alternatives, _cost, _quality, _search_quality
from benchmarks._harness import GRID_BEST, TUNER, WorkloadContext, compare, log
from benchmarks._page import replace_section, write_report
from benchmarks._report import header, render
from benchmarks._results import WorkloadResults
from benchmarks._settings import COMMITTED_PICKS, SuiteSettings, WorkloadGrid
from benchmarks._tuner import (
    DEFAULT_SPACE,
    TunerOutcome,
    median_run,
    median_wall_s,
    tune,
    tune_default,
    tuner_method,
)


def _measure_workload(
    grid: WorkloadGrid, settings: SuiteSettings, db_path: Path
) -> tuple[WorkloadResults, WorkloadContext]:
    ctx = WorkloadContext.open(grid, settings)
    db = open_database(str(db_path))
    try:
        grid_outcome = _search_quality.exhaustive_grid(ctx)
        tuners = tuple(
            tune(ctx, db, grid.tuner_trials, seed=settings.seed + index)
            for index in range(settings.tuner_runs)
        )
        # The budgets of the search-only alternatives: the jobs' medians.
        wall_s = median_wall_s(tuners)
        measured = int(statistics.median(t.measured for t in tuners))
        alternatives = _alternatives.find_alternatives(
            ctx, grid_outcome, grid.tuner_trials, measured
        )
        random_draws = _alternatives.random_at_wall_time(ctx, grid_outcome, wall_s)
        alternatives.append(
            _alternatives.plain_search(tune(ctx, db, grid.tuner_trials, profile=False))
        )
        default_tuner = tune_default(ctx, db)
        configs = {tuner_method(t.seed): t.config for t in tuners}
        configs.update({GRID_BEST: grid_outcome.best(), DEFAULT_SPACE: default_tuner.config})
        configs.update({a.method: a.config for a in alternatives if a.config is not None})
        # Random search's picks too: the grid measurement that chose each one flatters it.
        configs.update({_alternatives.random_method(d.seed): d.pick for d in random_draws})
        comparison = compare(ctx, configs, settings.rounds)
        tuner = median_run(tuners, comparison)
        comparison.configs[TUNER] = tuner.config
        quality = _quality.measure_quality(ctx, tuner.config)
    finally:
        db.dispose()
    results = WorkloadResults(
        grid.name,
        grid_outcome,
        tuner,
        alternatives,
        comparison,
        quality,
        ctx.budget_bytes,
        tuple(random_draws),
        default_tuner,
        ctx.full_space().size(),
        tuners,
    )
    return results, ctx


def run_suite(
    settings: SuiteSettings,
    output: Path,
    workloads: list[str] | None = None,
    databases: Path | None = None,
) -> Path:
    """Run every section on the chosen workloads (all by default) and write the report.

    Where ``output`` is a results page (``benchmarks/RESULTS.md``), only its latest run is
    replaced and the run before is appended to the month's file in ``benchmarks/log/``.

    The tuner's jobs go to one SQLite file per workload in ``databases``, kept to be read trial
    by trial (``autotune jobs``, ``autotune report``), or in a temporary folder deleted at the end.
    """
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    grids = [g for g in settings.grids if not workloads or g.name in workloads]
    if not grids:
        raise SystemExit(f"no workload of the {settings.label} suite matches {workloads}")
    results: list[WorkloadResults] = []
    grown: list[TunerOutcome] = []
    if databases is not None:
        databases.mkdir(parents=True, exist_ok=True)
    with (
        contextlib.nullcontext(str(databases))
        if databases is not None
        else tempfile.TemporaryDirectory(prefix="autotune-bench-")
    ) as workdir:
        for grid in grids:
            db_path = Path(workdir) / f"{grid.name}.db"
            result, ctx = _measure_workload(grid, settings, db_path)
            results.append(result)
            if grid.name == settings.growth_workload:
                db = open_database(str(db_path))
                try:
                    grown = _cost.growth(ctx, db, settings.growth_budgets)
                finally:
                    db.dispose()
    growth_name = settings.growth_workload if grown else ""
    sections = [
        _search_quality.section(results),
        _search_quality.default_space_section(results),
        _alternatives.section(results),
        _quality.measurement_section(results),
        _cost.section(results, grown, growth_name),
        _quality.limit_section(results),
    ]
    wall = time.monotonic() - started
    report = render(header(settings, wall, (load_before, os.getloadavg()[0])), sections)
    logged = write_report(output, report)
    log(f"suite done in {wall / 60:.1f} min; report written to {output}" + _moved(logged))
    return output


def _moved(logged: Path | None) -> str:
    return f"; the run it replaced appended to {logged}" if logged else ""


#: The heading ``--only-quality`` replaces the section under.
_SECTION_3 = "## 3. Measurement quality"


def run_quality_only(
    settings: SuiteSettings, output: Path, workloads: list[str] | None = None
) -> Path:
    """Re-measure section 3 alone on the committed picks and replace it in ``output``."""
    if not output.is_file() or _SECTION_3 not in output.read_text():
        raise SystemExit(
            f"python -m benchmarks --only-quality: {output} is not a report with a "
            f"'{_SECTION_3}' section to replace; pass --output a copy of "
            "benchmarks/RESULTS.md"
        )
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    grids = [
        g
        for g in settings.grids
        if (not workloads or g.name in workloads) and g.name in COMMITTED_PICKS
    ]
    qualities = []
    for grid in grids:
        ctx = WorkloadContext.open(grid, settings)
        qualities.append(
            (grid.name, _quality.measure_quality(ctx, COMMITTED_PICKS[grid.name], in_memory=False))
        )
    section = _quality.quality_only_section(qualities)
    wall = time.monotonic() - started
    load_after, cores = os.getloadavg()[0], os.cpu_count() or 1
    section.findings.append(
        f"Section 3 re-measured on its own on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        f" in {wall / 60:.1f} min (`python -m benchmarks --only-quality`), {settings.repeats} "
        f"interleaved rounds; load average (1 min) at start / end "
        f"{load_before:.2f} / {load_after:.2f} on {cores} cores"
        + (
            ": other processes shared the cores, which widens the spread."
            if max(load_before, load_after) > cores
            else "."
        )
    )
    logged = replace_section(output, _SECTION_3, "## 4.", section.markdown())
    log(f"section 3 done in {wall / 60:.1f} min; written into {output}" + _moved(logged))
    return output
