"""Sections 3 and 5: measurement quality, and the limit the input pipeline leaves.

One interleaved session per workload runs the tuner's pick three ways, each in a fresh
process: through autotune's runner, through the benchmark's own plain loop fed by a
DataLoader, and through the same plain loop with the data already in memory and no loader.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.space import Config
from benchmarks._harness import (
    Run,
    WorkloadContext,
    clearly_apart,
    cv,
    describe,
    interleave,
    log,
    median,
    run_module,
    throughputs,
)
from benchmarks._report import Section, number, percent, ratio

if TYPE_CHECKING:
    from benchmarks._results import WorkloadResults

RUNNER, PLAIN, IN_MEMORY = "runner", "plain", "memory"


@dataclass(frozen=True)
class QualityOutcome:
    config: Config
    runs: dict[str, list[Run]]

    def median(self, kind: str) -> float | None:
        return median(throughputs(self.runs[kind]))

    def cv(self, kind: str) -> float | None:
        return cv(throughputs(self.runs[kind]))

    def relative(self, kind: str, reference: str) -> float | None:
        mine, theirs = self.median(kind), self.median(reference)
        return None if mine is None or not theirs else mine / theirs

    def data_wait(self) -> float | None:
        """Median share of the runner's window spent waiting for the next batch."""
        return median(
            [r.data_wait_fraction for r in self.runs[RUNNER] if r.data_wait_fraction is not None]
        )

    def clearly_apart(self, kind: str, reference: str) -> bool:
        return clearly_apart(self.runs[kind], self.runs[reference])


def plain_loop(ctx: WorkloadContext, config: Config, mode: str) -> Run:
    """One run of the benchmark's own loop in a fresh process, with section 3's plan."""
    plan = ctx.settings.measurement_quality_plan()
    started = time.monotonic()
    answer = run_module(
        "benchmarks._plain_loop",
        {
            "workload": ctx.grid.workload,
            "config": config.model_dump(),
            "mode": mode,
            "device": ctx.settings.device,
            "plan": {
                "warmup_steps": plan.warmup_steps,
                "min_steps": plan.min_steps,
                "min_seconds": plan.min_seconds,
                "seed": plan.seed,
            },
        },
        ctx.settings.trial_timeout_s,
    )
    return Run(
        outcome=answer["outcome"],
        samples_per_s=answer.get("samples_per_s"),
        duration_s=time.monotonic() - started,
        window_s=answer.get("window_s"),
        error=answer.get("error"),
    )


def measure_quality(ctx: WorkloadContext, config: Config, in_memory: bool = True) -> QualityOutcome:
    """Runner, plain loop and (for section 5) the in-memory loop, interleaved."""
    repeats = ctx.settings.repeats
    log(f"{ctx.name}: runner vs plain loop{' vs in-memory' if in_memory else ''}, {repeats} rounds")
    arms = {
        RUNNER: lambda: ctx.measure(config, ctx.settings.measurement_quality_plan()),
        PLAIN: lambda: plain_loop(ctx, config, "loader"),
    }
    if in_memory:
        arms[IN_MEMORY] = lambda: plain_loop(ctx, config, "memory")
    return QualityOutcome(config, interleave(arms, repeats))


def _session_spread(result: WorkloadResults) -> str:
    """Median and largest CV over every configuration of the comparison session."""
    values = [
        v for runs in result.comparison.runs.values() if (v := cv(throughputs(runs))) is not None
    ]
    if not values:
        return "n/a"
    return f"{percent(median(values))} / {percent(max(values))} ({len(values)} configs)"


#: The runner must agree with the plain loop within this (issue 7: runner / plain in 0.97-1.03).
AGREEMENT = 0.03

_INTRO = (
    "The tuner's pick measured repeatedly, each run a fresh process, interleaved: autotune's "
    "runner (its amortised epoch-start model over a short window) against the benchmark's own "
    "plain training loop (a DataLoader, the model, the optimizer and time.perf_counter, nothing "
    "from autotune's loop), which times whole epochs after a whole epoch of warm-up and the "
    "full garbage collection that setting up left due (the runner runs it before its warm-up). "
    "The runner "
    "times the window of a confirmation run of `autotune run` with its default options (the "
    "runs whose figures a recommendation reports), not the suite's shorter search window. CV "
    "is the spread of each kind's runs (coefficient of variation)."
)


def measurement_rows(name: str, quality: QualityOutcome) -> tuple[list[str], list[str]]:
    """The table row for one workload, and what it says in words."""
    row = [
        name,
        describe(quality.config),
        str(len(quality.runs[RUNNER])),
        number(quality.median(RUNNER)),
        percent(quality.cv(RUNNER)),
        number(quality.median(PLAIN)),
        percent(quality.cv(PLAIN)),
        ratio(quality.relative(RUNNER, PLAIN)),
    ]
    findings = []
    agreement = quality.relative(RUNNER, PLAIN)
    if agreement is not None and abs(agreement - 1) > AGREEMENT:
        how = (
            "every runner run differs from every plain-loop run in the same direction"
            if quality.clearly_apart(RUNNER, PLAIN)
            else "but their runs overlap: the difference is within this machine's spread"
        )
        findings.append(
            f"{name}: the runner's median is {100 * abs(agreement - 1):.0f}% "
            f"{'above' if agreement > 1 else 'below'} the plain loop's, {how}."
        )
    return row, findings


_COLUMNS = [
    "workload",
    "configuration",
    "runs each",
    "runner samples/s",
    "runner CV",
    "plain loop samples/s",
    "plain loop CV",
    "runner / plain",
]


def measurement_section(results: Sequence[WorkloadResults]) -> Section:
    out = Section(
        title="3. Measurement quality",
        intro=_INTRO + " The last column is the spread over every configuration of "
        "the section 1-2 session.",
        columns=[*_COLUMNS, "session CV median / max"],
    )
    for result in results:
        row, findings = measurement_rows(result.name, result.quality)
        out.rows.append([*row, _session_spread(result)])
        out.findings.extend(findings)
    return out


def quality_only_section(qualities: Sequence[tuple[str, QualityOutcome]]) -> Section:
    """Section 3 on its own (``python -m benchmarks --only-quality``)."""
    out = Section(title="3. Measurement quality", intro=_INTRO, columns=list(_COLUMNS))
    for name, quality in qualities:
        row, findings = measurement_rows(name, quality)
        out.rows.append(row)
        out.findings.extend(findings)
    return out


def limit_section(results: Sequence[WorkloadResults]) -> Section:
    out = Section(
        title="5. The limit: the recommendation against data already in memory",
        intro=(
            "End-to-end throughput of the tuner's pick against the same model and settings fed "
            "from a few batches built before timing and kept in memory, with no loader (on a "
            "CPU the device is the host, so 'on the device' means in memory). A ratio near "
            "1.00x means the recommendation hides the input pipeline; the gap is what loading "
            "still costs. *Waiting for data* is the share of the runner's timed window spent "
            "waiting for the next batch. Same session as section 3."
        ),
        columns=[
            "workload",
            "configuration",
            "runner: waiting for data",
            "runner samples/s",
            "plain loop samples/s",
            "in memory, no loader, samples/s",
            "runner / in memory",
            "plain loop / in memory",
        ],
    )
    for result in results:
        quality = result.quality
        out.rows.append(
            [
                result.name,
                describe(quality.config),
                percent(quality.data_wait()),
                number(quality.median(RUNNER)),
                number(quality.median(PLAIN)),
                number(quality.median(IN_MEMORY)),
                ratio(quality.relative(RUNNER, IN_MEMORY)),
                ratio(quality.relative(PLAIN, IN_MEMORY)),
            ]
        )
        hidden = quality.relative(PLAIN, IN_MEMORY)
        if hidden is not None and hidden < 0.9:
            out.findings.append(
                f"{result.name}: with the recommended settings the loader still costs "
                f"{100 * (1 - hidden):.0f}% of the in-memory throughput."
            )
    return out
