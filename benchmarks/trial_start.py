"""``python -m benchmarks.trial_start``: what starting a trial process costs, forked or not.

For each workload and round, the two ways to start trials run one after the other (their order
alternates between rounds), each as a job would: a :class:`TrialLauncher`, the probe, then one
trial of a short plan. ``exec`` is ``AUTOTUNE_TRIAL_START=exec`` (a fresh interpreter imports
torch, autotune and the workload per trial); ``fork`` forks the trial from the launcher's warm
server, which the probe started. Per trial it times, from the call of ``run_trial``:

- *to started*: the trial process's ``started`` event (its code is running);
- *to warm-up*: its first warm-up progress event (the model and loader are built, steps run);
- *trial*: the whole ``run_trial``;

and the probe (for ``fork``, including the server's start), and the trial's peak host memory
(PSS of its process tree: pages a forked trial shares with its server count half). Prints
medians and ranges as Markdown. With ``--jobs N`` it also runs N interleaved rounds of whole
tuning jobs (the suite's section 4 settings, 4 search trials) each way, and reports section 4's
figures for them. Run it under ``flock /tmp/autotune-bench.lock`` so that no
other benchmark overlaps.
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from autotune.measure import MeasurePlan
from autotune.runner import START_ENV, TrialLauncher, probe_workload, run_trial
from autotune.runner import _process as process_module
from autotune.space import Config
from autotune.store import open_database
from benchmarks._cost import Overhead
from benchmarks._harness import WorkloadContext
from benchmarks._settings import FULL
from benchmarks._tuner import tune

PLAN = MeasurePlan(warmup_steps=3, min_steps=10, min_seconds=1.0, progress_interval_s=0.05)
MODES = ("exec", "fork")
_arrivals: dict[str, float] = {}


def _timed_read_events(stream: IO[str], events: queue.Queue[dict[str, Any] | None]) -> None:
    """The runner's event reader, noting when each kind of event first arrives."""

    class Stamping(queue.Queue[dict[str, Any] | None]):
        def put(self, item: dict[str, Any] | None, *_: Any, **__: Any) -> None:
            if item is not None:
                _arrivals.setdefault(str(item.get("event")), time.monotonic())
            events.put(item)

    _original_read_events(stream, Stamping())


_original_read_events = process_module._read_events


@contextmanager
def _start_mode(mode: str) -> Iterator[None]:
    before = os.environ.get(START_ENV)
    os.environ[START_ENV] = mode
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(START_ENV, None)
        else:
            os.environ[START_ENV] = before


def measure_once(workload: str, mode: str) -> dict[str, float]:
    """One job's worth of starts: the probe, then one trial."""
    first_warmup: list[float] = []

    def on_progress(event: dict[str, Any]) -> bool:
        if event.get("warmup") and not first_warmup:
            first_warmup.append(time.monotonic())
        return False

    with _start_mode(mode), TrialLauncher(workload, "cpu") as launcher:
        started = time.monotonic()
        probe = probe_workload(workload, "cpu")
        probed = time.monotonic()
        _arrivals.clear()
        config = Config(batch_size=probe.workload.batch_size)
        called = time.monotonic()
        record = run_trial(workload, config, "cpu", PLAN, 300, on_progress=on_progress)
        finished = time.monotonic()
        assert record.outcome == "ok", record.error
        assert (launcher.unavailable is None) == (mode == "fork"), launcher.unavailable
    return {
        "probe": probed - started,
        "to started": _arrivals["started"] - called,
        "to warm-up": (first_warmup or [float("nan")])[0] - called,
        "trial": finished - called,
        "peak host memory": (record.peak_host_memory_bytes or 0) / 2**20,
    }


def _cell(values: list[float], unit: str = "s") -> str:
    if unit == "MiB":
        return f"{statistics.median(values):.0f} MiB ({min(values):.0f}-{max(values):.0f})"
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def _jobs(workloads: list[str], rounds: int, n_trials: int = 4) -> None:
    """Whole tuning jobs, exec and fork interleaved; section 4's figures for each."""
    grids = {f"builtin:{grid.name}": grid for grid in FULL.grids}
    results: dict[tuple[str, str], list[Overhead]] = {}
    with tempfile.TemporaryDirectory() as folder:
        db = open_database(f"sqlite:///{folder}/jobs.db")
        for workload in workloads:
            ctx = WorkloadContext.open(grids[workload], FULL)
            for number in range(rounds):
                for mode in MODES if number % 2 == 0 else MODES[::-1]:
                    with _start_mode(mode):
                        overhead = Overhead.of(tune(ctx, db, n_trials))
                    results.setdefault((workload, mode), []).append(overhead)
                    print(
                        f"# job {workload} round {number + 1} {mode}: wall "
                        f"{overhead.wall_s:.1f} s, {overhead.processes} processes, "
                        f"per trial {overhead.per_trial_s or 0:.2f} s",
                        flush=True,
                    )
    print(
        f"\nWhole jobs ({n_trials} search trials, section 4's settings), median (min-max) "
        f"over {rounds} interleaved rounds.\n"
    )
    print(
        "| workload | start | trial processes | tuning wall | fixed overhead per trial | "
        "fixed overhead share |"
    )
    print("|---|---|---|---|---|---|")
    for (workload, mode), runs in results.items():
        share = [100 * (run.fixed_fraction or 0.0) for run in runs]
        print(
            f"| {workload.removeprefix('builtin:')} | {mode} | "
            f"{statistics.median(run.processes for run in runs):.0f} | "
            f"{_cell([run.wall_s for run in runs])} | "
            f"{_cell([run.per_trial_s or 0.0 for run in runs])} | "
            f"{statistics.median(share):.1f}% ({min(share):.1f}-{max(share):.1f}) |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--workloads", nargs="+", default=["builtin:slow-storage", "builtin:text-transformer"]
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="also time whole tuning jobs, this many rounds each way",
    )
    args = parser.parse_args()
    process_module._read_events = _timed_read_events
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for workload in args.workloads:
        for number in range(args.rounds):
            modes = MODES if number % 2 == 0 else MODES[::-1]
            for mode in modes:
                figures = measure_once(workload, mode)
                results.setdefault((workload, mode), []).append(figures)
                print(
                    f"# {workload} round {number + 1} {mode}: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()),
                    flush=True,
                )
    keys = ("probe", "to started", "to warm-up", "trial", "peak host memory")
    print(f"\nMedian (min-max) over {args.rounds} interleaved rounds, CPU, plan {PLAN}.\n")
    print("| workload | start | " + " | ".join(keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for (workload, mode), runs in results.items():
        cells = [
            _cell([run[key] for run in runs], "MiB" if "memory" in key else "s") for key in keys
        ]
        print(f"| {workload.removeprefix('builtin:')} | {mode} | " + " | ".join(cells) + " |")
    if args.jobs:
        _jobs(args.workloads, args.jobs)


if __name__ == "__main__":
    main()
