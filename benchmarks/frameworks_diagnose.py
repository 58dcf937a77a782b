"""Where autotune's trial and the framework's own run part: both, at the same configurations.

For one framework script of benchmarks/frameworks.py, each round runs, each in a fresh
process and interleaved with the order rotated: autotune's trial measurement (the runner and
the confirmation's plan, as the job measures its baseline and its pick) of the baseline and of
the recommended configuration, and the framework's own ``fit()`` / ``train()`` of the same two
configurations applied through their exports, as benchmarks/frameworks.py runs them. Printed
per run: the trial's samples/s, median step, data wait, epoch restart and window; the run's
samples/s as the benchmark counts it, its median step, its rate over the steps past each
epoch's first, what an epoch's first step costs beyond a median one, and its threads. No tune:
the two configurations and the exports are a recommendation's (``autotune run``'s ``--out``)::

    flock -x /tmp/autotune-bench.lock python -m benchmarks.frameworks_diagnose \\
        --framework lightning --recommendation rec.json --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune.runner import TrialLauncher, probe_workload, run_trial
from autotune.space import Config
from autotune.tuner import TuneOptions
from benchmarks._harness import interleave, log
from benchmarks.frameworks import FRAMEWORKS, WARMUP_STEPS, framework_run

TRIAL_TIMEOUT_S = 600.0


def trial(
    workload: str, config: Config, confirm: bool, long_s: float | None = None
) -> dict[str, Any]:
    options = TuneOptions(workload=workload)
    plan = options.confirm_plan() if confirm else options.measure_plan()
    if long_s is not None:  # a window and a warm-up long enough to rule their length out
        plan = replace(plan, min_seconds=long_s, max_warmup_s=long_s)
    record = run_trial(workload, config, "cpu", plan, TRIAL_TIMEOUT_S)
    if record.outcome != "ok":
        raise SystemExit(f"the trial of {config} failed: {record.error}")
    result = {
        "samples_per_s": record.samples_per_s,
        "step_ms": record.step_time_median_ms,
        "data_wait": record.data_wait_fraction,
        "epoch_restart_s": record.epoch_restart_s,
        "steps": record.steps,
        "warmup_steps": record.warmup_steps,
        "window_s": record.window_s,
        "steps_per_epoch": record.steps_per_epoch,
    }
    log(f"trial {config.batch_size}: {json.dumps(result)}")
    return result


def run_stats(run: dict[str, Any]) -> dict[str, Any]:
    """The run's own figures from its steps' end times (see the module's docstring)."""
    stamps, samples = run["stamps"], run["samples"]
    epochs = run.get("epochs") or [0] * len(stamps)
    steps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    # Step i+1 ran from stamp i to stamp i+1; it began an epoch when its epoch differs.
    starts = [epochs[i + 1] != epochs[i] for i in range(len(steps))]
    timed = range(WARMUP_STEPS, len(steps))
    ordinary = [i for i in timed if not starts[i]]
    median = statistics.median(steps[i] for i in timed)
    excess = [steps[i] - median for i in timed if starts[i]]
    return {
        "samples_per_s": run["samples_per_s"],
        "step_ms": 1000 * median,
        "ordinary_samples_per_s": sum(samples[i + 1] for i in ordinary)
        / sum(steps[i] for i in ordinary),
        "epoch_starts": len(excess),
        "epoch_start_excess_s": statistics.median(excess) if excess else None,
        "steps": len(steps) - WARMUP_STEPS,
        "train_s": run["train_s"],
        "threads": run["threads"],
    }


def framework(key: str, exports: dict[str, Any], samples: int) -> dict[str, Any]:
    result = run_stats(framework_run(key, exports, samples))
    log(f"{key} {'recommended' if exports else 'baseline'}: {json.dumps(result)}")
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=sorted(FRAMEWORKS), default="lightning")
    parser.add_argument("--recommendation", type=Path, required=True, help="its JSON")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--run-samples", type=int, help="samples each framework run trains on")
    parser.add_argument("--search-plan", action="store_true", help="the search's shorter plan")
    parser.add_argument(
        "--long-window", type=float, help="also trials with this window and warm-up, seconds"
    )
    parser.add_argument("--trials-only", action="store_true", help="no framework runs")
    parser.add_argument(
        "--fresh-trials", action="store_true", help="trials as fresh interpreters, not forked"
    )
    parser.add_argument("--json", help="also write every figure here")
    options = parser.parse_args(argv)
    key = options.framework
    workload = FRAMEWORKS[key].workload
    samples = options.run_samples or FRAMEWORKS[key].run_samples
    document = json.loads(options.recommendation.read_text())
    sides = {
        "baseline": (Config(**document["baseline"]["config"]), {}),  # the script as written
        "recommended": (Config(**document["config"]), document["exports"]),
    }
    arms: dict[str, Callable[[], dict[str, Any]]] = {}
    launcher = contextlib.nullcontext() if options.fresh_trials else TrialLauncher(workload, "cpu")
    with launcher:
        probe_workload(workload, "cpu")
        for side, (config, exports) in sides.items():
            arms[f"trial {side}"] = functools.partial(
                trial, workload, config, not options.search_plan
            )
            if options.long_window:
                arms[f"trial {side}, long"] = functools.partial(
                    trial, workload, config, True, options.long_window
                )
            if not options.trials_only:
                arms[f"{key} {side}"] = functools.partial(framework, key, exports, samples)
        runs = interleave(arms, options.rounds)
    if options.json:
        with open(options.json, "w") as out:
            json.dump(runs, out, indent=1)
    names = sorted({name for each in runs.values() for run in each for name in run})
    print("| arm | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for arm, each in runs.items():
        cells = []
        for name in names:
            values = [run[name] for run in each if run.get(name) is not None]
            cells.append(f"{statistics.median(values):.4g}" if values else "-")
        print(f"| {arm} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
