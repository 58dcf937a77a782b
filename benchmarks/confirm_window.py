"""``python -m benchmarks.confirm_window``: how long a confirmation run's window must be.

The confirmation decides between a candidate and the baseline from paired rounds (both
measured in the same round, in fresh processes). What decides how well it decides is the
spread of the paired ratio candidate / baseline, which has two sources: the window's own noise
(fewer steps, more noise) and the machine's drift between the two runs of a pair (a longer
window spreads the pair further apart in time). This measures that spread for a few window
lengths (otherwise the search's plan of ``autotune run``'s defaults), interleaved: each round
runs every window length once for both configurations (the order of the windows rotated each
round, the order of the pair alternated), through autotune's trial runner, forked from a warm
server, as the tuner measures.

Per workload and window: each configuration's median samples/s and run-to-run CV, the paired
ratio's median, CV and range, and the mean seconds a run took. Markdown on stdout. Run it under
``flock /tmp/autotune-bench.lock`` so that no other benchmark overlaps.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

from autotune.measure import MeasurePlan
from autotune.runner import TrialLauncher
from autotune.space import Config
from autotune.tuner import TuneOptions
from benchmarks._harness import Run, WorkloadContext, cv, describe, log
from benchmarks._settings import FULL

#: The candidate beside each workload's own defaults: a configuration of the kind the tuner
#: confirms there (benchmarks/RESULTS.md section 1b).
CANDIDATES = {
    "text-transformer": Config(batch_size=64),
    "image-cnn": Config(batch_size=128, num_workers=2),
    "slow-storage": Config(batch_size=64, num_workers=8),
}


#: The search's plan of ``autotune run``'s defaults, whose seconds each window replaces.
SEARCH_PLAN = TuneOptions(workload="builtin:image-cnn").measure_plan()


def _plan(seconds: float) -> MeasurePlan:
    return replace(SEARCH_PLAN, min_seconds=seconds)


def measure_workload(name: str, windows: list[float], rounds: int) -> list[str]:
    """Rows of the Markdown table for one workload."""
    grid = next(grid for grid in FULL.grids if grid.name == name)
    with TrialLauncher(grid.workload, FULL.device):
        ctx = WorkloadContext.open(grid, FULL)
        pair = {"defaults": ctx.defaults(), "candidate": CANDIDATES[name]}
        runs: dict[tuple[float, str], list[Run]] = {
            (window, arm): [] for window in windows for arm in pair
        }
        for index in range(rounds):
            shift = index % len(windows)
            for window in windows[shift:] + windows[:shift]:
                arms = list(pair) if index % 2 == 0 else list(pair)[::-1]
                for arm in arms:
                    run = ctx.measure(pair[arm], _plan(window))
                    if not run.ok:
                        raise SystemExit(f"{name} {arm} with a {window:g} s window: {run.error}")
                    runs[(window, arm)].append(run)
                log(f"{name} round {index + 1}/{rounds}, window {window:g} s done")
    rows = []
    for window in windows:
        base, cand = runs[(window, "defaults")], runs[(window, "candidate")]
        ratios = [
            c.samples_per_s / b.samples_per_s
            for c, b in zip(cand, base, strict=True)
            if c.samples_per_s and b.samples_per_s
        ]
        speeds = {arm: [run.samples_per_s or 0.0 for run in runs[(window, arm)]] for arm in pair}
        durations = [run.duration_s for run in base + cand]
        rows.append(
            f"| {name} | {window:g} s | {statistics.median(speeds['defaults']):,.1f} "
            f"({100 * (cv(speeds['defaults']) or 0):.1f}%) | "
            f"{statistics.median(speeds['candidate']):,.1f} "
            f"({100 * (cv(speeds['candidate']) or 0):.1f}%) | "
            f"{statistics.median(ratios):.3f} | {100 * (cv(ratios) or 0):.1f}% | "
            f"{min(ratios):.3f}-{max(ratios):.3f} | {statistics.fmean(durations):.1f} s |"
        )
    log(f"{name}: defaults {describe(pair['defaults'])}; candidate {describe(pair['candidate'])}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workloads", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES)
    )
    parser.add_argument(
        "--windows", default="3,6,9", help="window lengths in seconds, comma-separated"
    )
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    windows = [float(value) for value in args.windows.split(",")]
    print(
        f"{args.rounds} interleaved rounds; windows of at least {SEARCH_PLAN.min_steps} "
        f"steps and the seconds given; warm-up {SEARCH_PLAN.warmup_steps} steps (autotune "
        f"run's defaults); device {FULL.device}.\n"
    )
    print(
        "| workload | window | defaults, samples/s (CV) | candidate, samples/s (CV) | "
        "paired ratio, median | its CV | its range | seconds a run |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in args.workloads:
        for row in measure_workload(name, windows, args.rounds):
            print(row, flush=True)


if __name__ == "__main__":
    main()
