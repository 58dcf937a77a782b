"""``python -m benchmarks.sampler_cost``: what the host-memory sampler costs the trial it watches.

One process trains a built-in workload (its configuration in ``KNOB_BENCHMARK_CONFIGS``,
through autotune's own :class:`TrainingLoop`) without a break, while another process watches
it with the runner's own :class:`TreeMemorySampler` in some periods and not in others. The
periods rotate between three arms of ``--period`` seconds each:

- ``off``: nothing watches the training process;
- ``sampler``: the sampler as trials run it;
- ``pss every sample``: the sampler reading PSS (a walk of the process's page tables under its
  memory-map lock) at every sample, as it did before it read RSS first.

Each arm's throughput is the samples trained in its periods over their duration; the ratios are
medians over the rounds of one arm's period against the ``off`` period of the same round, with
their quartiles. The minor page faults per step say whether the workload maps and unmaps memory
at each step (what makes a page-table walk collide with it). Run it under
``flock /tmp/autotune-bench.lock`` so that no other benchmark overlaps.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import statistics
import time
from multiprocessing.synchronize import Event
from typing import Any

import torch

from autotune.measure import TrainingLoop
from autotune.measure import _host_memory as host_memory
from autotune.workload import load_workload
from benchmarks._settings import KNOB_BENCHMARK_CONFIGS

ARMS = ("off", "sampler", "pss every sample")


def _watch(pid: int, arm_flags: dict[str, Event], stop: Event) -> None:
    """Run the sampler on ``pid`` while an arm's flag is set (in a process of its own)."""
    as_trials_run_it = host_memory.PSS_REREAD_GROWTH
    while not stop.is_set():
        for arm, flag in arm_flags.items():
            if not flag.is_set():
                continue
            host_memory.PSS_REREAD_GROWTH = -1.0 if arm == "pss every sample" else as_trials_run_it
            with host_memory.TreeMemorySampler(pid):
                while flag.is_set() and not stop.is_set():
                    time.sleep(0.01)
        time.sleep(0.01)


def measure(workload_name: str, rounds: int, period_s: float) -> dict[str, Any]:
    context = multiprocessing.get_context("fork")  # before torch starts any thread
    flags = {arm: context.Event() for arm in ARMS[1:]}
    stop = context.Event()
    watcher = context.Process(target=_watch, args=(os.getpid(), flags, stop), daemon=True)
    watcher.start()
    torch.manual_seed(0)
    loop = TrainingLoop(
        load_workload(f"builtin:{workload_name}"),
        KNOB_BENCHMARK_CONFIGS[workload_name],
        torch.device("cpu"),
    )
    for _ in range(10):
        loop.step(loop.next_batch())
    rates: dict[str, list[float]] = {arm: [] for arm in ARMS}
    faults: list[float] = []
    try:
        for round_index in range(rounds):
            order = ARMS[round_index % 3 :] + ARMS[: round_index % 3]
            for arm in order:
                if arm in flags:
                    flags[arm].set()
                time.sleep(0.05)  # the watcher sees the flag
                samples, steps = 0, 0
                faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                started = time.perf_counter()
                while time.perf_counter() - started < period_s:
                    samples += loop.step(loop.next_batch())
                    steps += 1
                loop.check_finite()  # the period's losses were finite
                rates[arm].append(samples / (time.perf_counter() - started))
                faults.append(
                    (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before) / steps
                )
                if arm in flags:
                    flags[arm].clear()
    finally:
        stop.set()
        watcher.join(timeout=5)
    return {"rates": rates, "faults_per_step": statistics.median(faults)}


def _quartiles(values: list[float]) -> str:
    low, middle, high = statistics.quantiles(values, n=4)
    return f"{middle:.3f} ({low:.3f}-{high:.3f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.sampler_cost",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument(
        "--workload",
        action="append",
        default=None,
        help="a built-in workload (repeatable; default: text-transformer)",
    )
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--period", type=float, default=3.0, help="seconds per arm and round")
    args = parser.parse_args(argv)
    print(
        "| workload | batch, precision | minor faults per step | off, samples/s "
        "| sampler / off | pss every sample / off |"
    )
    print("|---|---|---|---|---|---|")
    for name in args.workload or ["text-transformer"]:
        measured = measure(name, args.rounds, args.period)
        rates = measured["rates"]
        off = rates["off"]
        ratios = {arm: [a / b for a, b in zip(rates[arm], off, strict=True)] for arm in ARMS[1:]}
        pick = KNOB_BENCHMARK_CONFIGS[name]
        print(
            f"| {name} | bs {pick.batch_size}, {pick.amp} | {measured['faults_per_step']:,.0f} "
            f"| {statistics.median(off):,.0f} | {_quartiles(ratios['sampler'])} "
            f"| {_quartiles(ratios['pss every sample'])} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
