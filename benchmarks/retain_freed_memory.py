"""``python -m benchmarks.retain_freed_memory``: what the ``retain_freed_memory`` knob changes
in a user's own training loop on a CPU.

For each built-in workload, its configuration in ``KNOB_BENCHMARK_CONFIGS`` (in fp32 where the
CPU has no bf16 instructions) is trained by the benchmark's plain loop
(``benchmarks._plain_loop``: a ``DataLoader``, the model, the optimizer, nothing of autotune's
loop) in fresh processes, with glibc's defaults and with the knob's thresholds set by hand, the
two interleaved round by round. Each run warms up for one epoch and then times whole epochs for
at least ``--seconds``: a long window, so that what is seen is a training run's steady state,
not a fresh process's first steps. Reported per arm: median samples/s with its spread (CV),
minor page faults per step in the window, and the process's peak resident size; and the ratio
of the medians. Run it under ``flock /tmp/autotune-bench.lock`` so that no other benchmark
overlaps.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from typing import Any

import torch

from autotune.measure import device_info
from autotune.space import Config
from benchmarks._harness import cv, interleave, log, run_module
from benchmarks._settings import KNOB_BENCHMARK_CONFIGS

ARMS = {"glibc defaults": False, "retain_freed_memory": True}


def _config(name: str) -> Config:
    pick = KNOB_BENCHMARK_CONFIGS[name]
    if pick.amp == "bf16" and not device_info(torch.device("cpu")).bf16_native:
        return pick.model_copy(update={"amp": "off"})  # emulated bf16 is not what one trains
    return pick


def _run(name: str, config: Config, seconds: float) -> dict[str, Any]:
    """One fresh plain-loop process; its answer, logged."""
    answer = run_module(
        "benchmarks._plain_loop",
        {
            "workload": f"builtin:{name}",
            "config": config.model_dump(),
            "mode": "loader",
            "device": "cpu",
            "plan": {"warmup_steps": 0, "min_steps": 1, "min_seconds": seconds, "seed": 0},
        },
        timeout_s=seconds * 4 + 300,
    )
    if answer["outcome"] != "ok":
        raise SystemExit(f"{name}: the plain loop failed: {answer.get('error')}")
    log(
        f"{name}, retain_freed_memory={config.retain_freed_memory}: "
        f"{answer['samples_per_s']:,.1f} samples/s, "
        f"{answer['minor_faults_per_step']:,.0f} faults/step"
    )
    return answer


def measure(
    name: str, base: Config, rounds: int, seconds: float
) -> dict[str, list[dict[str, Any]]]:
    """Every arm once per round, the order alternating, so drift falls on both alike."""
    return interleave(
        {
            arm: functools.partial(
                _run, name, base.model_copy(update={"retain_freed_memory": retain}), seconds
            )
            for arm, retain in ARMS.items()
        },
        rounds,
    )


def _row(
    name: str, config: Config, arm: str, runs: list[dict[str, Any]], reference: list[dict[str, Any]]
) -> str:
    rates = [run["samples_per_s"] for run in runs]
    spread = cv(rates)
    ratio = statistics.median(rates) / statistics.median(r["samples_per_s"] for r in reference)
    faults = statistics.median(run["minor_faults_per_step"] for run in runs)
    rss = max(run["peak_rss_bytes"] for run in runs) / 2**20
    return (
        f"| {name} | bs {config.batch_size}, workers {config.num_workers}, {config.amp} "
        f"| {arm} | {statistics.median(rates):,.1f} | "
        f"{'-' if spread is None else f'{spread:.1%}'} | {ratio:.2f}x | {faults:,.0f} "
        f"| {rss:,.0f} MiB |"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.retain_freed_memory",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument(
        "--workload",
        action="append",
        default=None,
        help="a built-in workload (repeatable; default: text-transformer and image-cnn)",
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--seconds",
        type=float,
        default=60.0,
        help="the least seconds each run times, after one epoch of warm-up",
    )
    args = parser.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(
        f"{started}, {device_info(torch.device('cpu')).name}, {args.rounds} rounds, "
        f"at least {args.seconds:g} s timed per run\n"
    )
    print(
        "| workload | configuration | malloc | samples/s (median) | CV | / defaults "
        "| minor faults per step | peak RSS |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in args.workload or ["text-transformer", "image-cnn"]:
        config = _config(name)
        runs = measure(name, config, args.rounds, args.seconds)
        for arm in ARMS:
            print(_row(name, config, arm, runs[arm], runs["glibc defaults"]), flush=True)


if __name__ == "__main__":
    main()
