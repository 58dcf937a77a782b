"""``python -m benchmarks.optimizer_impl``: what ``optimizer_impl`` changes in a training step.

Each workload's own configuration (PyTorch's defaults at its batch size) is measured with its
optimizer as built (``default``) and rebuilt with ``foreach=True`` and ``fused=True``, where the
probe found the class steps with them on the device, through autotune's trial runner (a fresh
process forked from one warm server per workload, the warm-up and timed window of ``autotune
run``'s search), the implementations interleaved round by round with the order rotated, so
that drift falls on all of them alike. Only the optimizer's implementation differs between the
arms, so a step-time difference is the optimizer's.

The optimizer's step alone is timed apart as well (``benchmarks._optimizer_step``: one fresh
process, the model's gradients of one batch, each implementation stepping ``OPTIMIZER_STEPS``
times a round, interleaved for as many rounds), since in a whole step its difference can hide
in the run-to-run spread.

Reported per workload and implementation: the median of the runs' median step times, its
spread across runs (CV and range), median samples/s and the ratio of step times to
``default``'s; then the optimizer's step alone, the median of its rounds' medians and their
range. Markdown on stdout. Run it under ``flock -x /tmp/autotune-bench.lock`` so that
no other benchmark overlaps.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from dataclasses import replace

from autotune.measure import MeasurePlan
from autotune.runner import TrialLauncher, probe_workload, run_trial
from autotune.space import Config
from autotune.store import TrialRecord
from autotune.tuner import TuneOptions
from benchmarks._harness import cv, interleave, log, run_module

#: The built-in text model and a plain-torch transformer with AdamW in two parameter groups.
WORKLOADS = ("builtin:text-transformer", "benchmarks/workloads/plain_transformer.py")
#: The search's plan of ``autotune run``'s defaults.
SEARCH_PLAN = TuneOptions(workload="builtin:text-transformer").measure_plan()
TRIAL_TIMEOUT_S = 300.0
#: Steps of the optimizer alone in each round of its own timing.
OPTIMIZER_STEPS = 20


def _measured(workload: str, config: Config, plan: MeasurePlan) -> TrialRecord:
    record = run_trial(workload, config, "cpu", plan, TRIAL_TIMEOUT_S)
    if record.outcome != "ok" or record.step_time_median_ms is None:
        raise SystemExit(f"{workload} optimizer_impl={config.optimizer_impl}: {record.error}")
    log(
        f"{workload} {config.optimizer_impl}: {record.step_time_median_ms:.1f} ms a step, "
        f"{record.samples_per_s:,.1f} samples/s"
    )
    return record


def measure_workload(workload: str, rounds: int, plan: MeasurePlan) -> list[str]:
    """Rows of the Markdown table for one workload."""
    with TrialLauncher(workload, "cpu"):
        probe = probe_workload(workload, "cpu")
        impls = ("default", *probe.workload.optimizer_impls)
        base = Config(batch_size=probe.workload.batch_size)
        arms = {
            impl: functools.partial(
                _measured, workload, base.model_copy(update={"optimizer_impl": impl}), plan
            )
            for impl in impls
        }
        runs = interleave(arms, rounds)
    alone = run_module(
        "benchmarks._optimizer_step",
        {"workload": workload, "impls": list(impls), "steps": OPTIMIZER_STEPS, "rounds": rounds},
        timeout_s=TRIAL_TIMEOUT_S,
    )
    if alone["outcome"] != "ok":
        raise SystemExit(f"{workload}: timing the optimizer alone failed: {alone['error']}")
    steps = {impl: [r.step_time_median_ms or 0.0 for r in runs[impl]] for impl in impls}
    reference = statistics.median(steps["default"])
    rows = []
    for impl in impls:
        times = steps[impl]
        rates = [r.samples_per_s or 0.0 for r in runs[impl]]
        spread = cv(times)
        optimizer_ms = alone["ms"][impl]
        rows.append(
            f"| {probe.workload.name} ({probe.workload.optimizer}, bs {base.batch_size}) "
            f"| {impl} | {statistics.median(times):.1f} | "
            f"{'-' if spread is None else f'{spread:.1%}'} | {min(times):.1f}-{max(times):.1f} "
            f"| {statistics.median(rates):,.1f} | {statistics.median(times) / reference:.3f} "
            f"| {statistics.median(optimizer_ms):.2f} "
            f"({min(optimizer_ms):.2f}-{max(optimizer_ms):.2f}) |"
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.optimizer_impl",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument(
        "--workload",
        action="append",
        default=None,
        help=f"a workload reference (repeatable; default: {', '.join(WORKLOADS)})",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--seconds",
        type=float,
        default=SEARCH_PLAN.min_seconds,
        help="the least seconds each run's window times (default: autotune run's search)",
    )
    args = parser.parse_args(argv)
    plan = replace(SEARCH_PLAN, min_seconds=args.seconds)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(
        f"{started}, CPU, {args.rounds} interleaved rounds, windows of at least "
        f"{plan.min_steps} steps and {plan.min_seconds:g} s after {plan.warmup_steps} warm-up "
        "steps\n"
    )
    print(
        "| workload | optimizer_impl | step ms (median of runs) | CV | range | samples/s "
        "| step time / default | optimizer.step alone, ms (range of rounds) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for workload in args.workload or WORKLOADS:
        for row in measure_workload(workload, args.rounds, plan):
            print(row, flush=True)


if __name__ == "__main__":
    main()
