"""Shared measurement plumbing: one workload's context, fresh-process runs, interleaving, stats.

Every throughput the suite compares goes through :func:`autotune.runner.run_trial`, the
runner the tuner itself uses, with the same plan and memory budget; only the benchmark's own
plain loop (``_plain_loop``) and the batch-size finders run outside it, each in a fresh
process of its own.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from autotune.measure import MeasurePlan
from autotune.runner import ProbeResult, kill_group, probe_workload, run_trial
from autotune.space import Config, SearchSpace
from autotune.store import TrialRecord
from autotune.tuner import TuneOptions, parse_memory
from benchmarks._settings import SuiteSettings, WorkloadGrid

#: What a DataLoader with workers prefetches when ``prefetch_factor`` is left unset.
TORCH_DEFAULT_PREFETCH = 2

#: Ratios within this of 1.00 are reported as a tie, not as a win or a loss.
TIE = 0.005

#: Names of the two reference methods in a comparison session.
TUNER = "autotune"
GRID_BEST = "grid best"

#: The folder that holds the ``benchmarks`` package, so helper processes can import it.
_PROJECT_ROOT = Path(__file__).resolve().parent.parent


def log(message: str) -> None:
    """Progress on stderr, so a long run can be followed (``tail -f``)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Run:
    """One fresh-process measurement of one configuration."""

    outcome: str
    samples_per_s: float | None
    duration_s: float
    window_s: float | None = None
    #: Share of the timed window spent waiting for the next batch (autotune's runner only).
    data_wait_fraction: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok" and self.samples_per_s is not None

    @classmethod
    def of(cls, record: TrialRecord) -> Run:
        """The run a trial of autotune's runner recorded."""
        return cls(
            outcome=record.outcome,
            samples_per_s=record.samples_per_s,
            duration_s=record.duration_s or 0.0,
            window_s=record.window_s,
            data_wait_fraction=record.data_wait_fraction,
            error=record.error,
        )


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def cv(values: list[float]) -> float | None:
    """Coefficient of variation (sample standard deviation / mean)."""
    if len(values) < 2:
        return None
    return statistics.stdev(values) / statistics.fmean(values)


def throughputs(runs: list[Run]) -> list[float]:
    return [run.samples_per_s for run in runs if run.ok and run.samples_per_s is not None]


def clearly_apart(runs: list[Run], others: list[Run]) -> bool:
    """Every run of one beat every run of the other: a difference, not run-to-run noise."""
    mine, theirs = throughputs(runs), throughputs(others)
    return bool(mine and theirs) and (min(mine) > max(theirs) or max(mine) < min(theirs))


def describe(config: Config) -> str:
    """A configuration in a few words, listing only what differs from PyTorch's defaults."""
    parts = [f"bs {config.batch_size}", f"workers {config.num_workers}"]
    if config.amp != "off":
        parts.append(config.amp)
    if config.num_workers and config.prefetch_factor not in (None, TORCH_DEFAULT_PREFETCH):
        parts.append(f"prefetch {config.prefetch_factor}")
    if config.num_workers and config.persistent_workers:
        parts.append("persistent")
    for flag in (
        "pin_memory",
        "channels_last",
        "cudnn_benchmark",
        "tf32",
        "device_prefetch",
        "retain_freed_memory",
    ):
        if getattr(config, flag):
            parts.append(flag.replace("_", " "))
    if config.compile != "off":
        parts.append(f"compile {config.compile}")
    if config.intra_op_threads is not None:
        parts.append(
            f"{config.intra_op_threads} intra-op thread{'s' if config.intra_op_threads > 1 else ''}"
        )
    if config.grad_accum_steps > 1:
        parts.append(f"accumulation {config.grad_accum_steps}")
    return ", ".join(parts)


class WorkloadContext:
    """One built-in workload, probed once on the suite's device, with the suite's plan and
    memory budget (of host memory on a CPU, of device memory on CUDA, as the tuner holds it)."""

    def __init__(self, grid: WorkloadGrid, settings: SuiteSettings, probe: ProbeResult) -> None:
        self.grid = grid
        self.settings = settings
        self.probe = probe
        self.budget_bytes = parse_memory(settings.max_memory, probe.device.memory_bytes)

    @classmethod
    def open(cls, grid: WorkloadGrid, settings: SuiteSettings) -> WorkloadContext:
        return cls(grid, settings, probe_workload(grid.workload, settings.device))

    @property
    def name(self) -> str:
        return self.grid.name

    def options(self, n_trials: int, profile: bool = True, seed: int | None = None) -> TuneOptions:
        """The tuner's options: the reduced space, the suite's plan and memory budget, the
        suite's seed unless ``seed`` is given; with ``profile=False`` the plain search
        (``--no-profile``)."""
        plan = self.settings.plan
        return TuneOptions(
            workload=self.grid.workload,
            n_trials=n_trials,
            trial_timeout_s=self.settings.trial_timeout_s,
            max_memory=self.settings.max_memory,
            fixed=self.grid.fixed(),
            ranges=self.grid.ranges(),
            device=self.settings.device,
            seed=self.settings.seed if seed is None else seed,
            warmup_steps=plan.warmup_steps,
            min_steps=plan.min_steps,
            min_seconds=plan.min_seconds,
            confirm_top=self.settings.confirm_top,
            confirm_rounds=self.settings.confirm_rounds,
            profile=profile,
            profile_seconds=self.settings.profile_seconds,
        )

    def space(self) -> SearchSpace:
        """The reduced space, built exactly as the tuner builds it from its options."""
        options = self.options(1)
        return SearchSpace(self.probe.device, self.probe.workload, options.fixed, options.ranges)

    def full_space(self) -> SearchSpace:
        """The tuner's default space on this device: what its checklist is written for."""
        return SearchSpace(self.probe.device, self.probe.workload)

    def defaults(self) -> Config:
        """PyTorch's defaults with the workload's own batch size."""
        return Config(batch_size=self.probe.workload.batch_size)

    def measure(self, config: Config, plan: MeasurePlan | None = None) -> Run:
        """One run of ``config`` through autotune's trial runner, as the tuner measures (with
        the suite's plan unless ``plan`` is given)."""
        result = run_trial(
            self.grid.workload,
            config,
            self.settings.device,
            plan or self.settings.plan,
            self.settings.trial_timeout_s,
            memory_budget_bytes=self.budget_bytes,
            budget_is_host_memory=not self.probe.device.is_cuda,
            device_uuid=self.probe.device_uuid,
        )
        return Run.of(result)


Measured = TypeVar("Measured")


def interleave(
    arms: Mapping[str, Callable[[], Measured]], rounds: int
) -> dict[str, list[Measured]]:
    """Run every arm once per round, rotating the order, so drift falls on all of them alike."""
    names = list(arms)
    runs: dict[str, list[Measured]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            runs[name].append(arms[name]())
    return runs


def run_module(module: str, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Run ``python -m module`` in a fresh process group; it answers one JSON line on stdout.

    Returns ``{"outcome": "error", "error": ...}`` when it fails, times out or says nothing.
    """
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            filter(None, [str(_PROJECT_ROOT), os.environ.get("PYTHONPATH")])
        ),
    )
    process = subprocess.Popen(
        [sys.executable, "-m", module],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
        text=True,
    )
    try:
        stdout, stderr = process.communicate(json.dumps(request), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(process.pid)
        process.communicate()
        return {"outcome": "error", "error": f"{module} did not finish within {timeout_s:g} s"}
    finally:
        kill_group(process.pid)  # DataLoader workers it may have left behind
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            answer: dict[str, Any] = json.loads(line)
            return answer
    last = stderr.strip().splitlines()[-1:] or [f"exit code {process.returncode}"]
    return {"outcome": "error", "error": f"{module} failed: {last[0]}"}


@dataclass
class Comparison:
    """Configurations found by several methods, re-measured side by side in one session."""

    configs: dict[str, Config]
    #: Runs per configuration key; methods that found the same configuration share them.
    runs: dict[str, list[Run]]

    def runs_of(self, method: str) -> list[Run]:
        return self.runs[self.configs[method].key()]

    def median(self, method: str) -> float | None:
        return median(throughputs(self.runs_of(method)))

    def relative(self, method: str, reference: str) -> float | None:
        """Median throughput of ``method`` over that of ``reference``."""
        mine, theirs = self.median(method), self.median(reference)
        return None if mine is None or not theirs else mine / theirs

    def clearly_apart(self, method: str, reference: str) -> bool:
        return clearly_apart(self.runs_of(method), self.runs_of(reference))


def compare(ctx: WorkloadContext, configs: dict[str, Config], rounds: int) -> Comparison:
    """Re-measure each distinct configuration ``rounds`` times, interleaved."""
    distinct = {config.key(): config for config in configs.values()}
    log(f"{ctx.name}: re-measuring {len(distinct)} configurations x {rounds}, interleaved")
    arms = {key: functools.partial(ctx.measure, config) for key, config in distinct.items()}
    return Comparison(dict(configs), interleave(arms, rounds))
