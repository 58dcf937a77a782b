"""Section 1, search quality: the tuner's pick against the best of an exhaustive grid."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from autotune.predict import predict_configs
from autotune.space import Config
from benchmarks._harness import GRID_BEST, TIE, TUNER, Run, WorkloadContext, describe, log
from benchmarks._report import Section, number, ratio
from benchmarks._tuner import DEFAULT_SPACE, tuner_method
from benchmarks.predictions import PredictionCheck

if TYPE_CHECKING:
    from benchmarks._results import WorkloadResults
    from benchmarks._tuner import TunerOutcome


@dataclass(frozen=True)
class GridOutcome:
    """Every configuration of the reduced space, each measured once through the runner."""

    configs: list[Config]
    runs: dict[str, Run]
    wall_s: float

    def value(self, config: Config) -> float:
        run = self.runs.get(config.key())
        return run.samples_per_s if run is not None and run.ok and run.samples_per_s else 0.0

    def ranked(self) -> list[Config]:
        return sorted(self.configs, key=self.value, reverse=True)

    def best(self) -> Config:
        return self.ranked()[0]

    def rank(self, config: Config) -> int | None:
        """1 for the grid's fastest; None for a configuration outside the grid."""
        keys = [c.key() for c in self.ranked()]
        return keys.index(config.key()) + 1 if config.key() in keys else None


def grid_configs(ctx: WorkloadContext) -> list[Config]:
    """Every configuration of the reduced space, built by the tuner's own ``SearchSpace``."""
    space = ctx.space()
    names = list(space.searched)
    configs = {
        config.key(): config
        for config in (
            space.config_from(dict(zip(names, values, strict=True)))
            for values in itertools.product(*space.searched.values())
        )
    }
    assert len(configs) == space.size(), "the grid must cover the tuner's whole space"
    return list(configs.values())


def exhaustive_grid(ctx: WorkloadContext) -> GridOutcome:
    configs = grid_configs(ctx)
    log(f"{ctx.name}: exhaustive grid of {len(configs)} configurations")
    started = time.monotonic()
    runs = {config.key(): ctx.measure(config) for config in configs}
    wall = time.monotonic() - started
    failed = sum(1 for run in runs.values() if not run.ok)
    log(f"{ctx.name}: grid done in {wall:.0f} s ({failed} failed)")
    return GridOutcome(configs, runs, wall)


def _ranks(values: Sequence[float]) -> np.ndarray:
    return np.argsort(np.argsort(np.asarray(values)))


def prediction_findings(
    name: str, grid: GridOutcome, tuner: TunerOutcome, budget_bytes: int | None
) -> list[str]:
    """How well the tuner's profile predicted: its trials (measured / predicted), and its
    ranking of the whole grid against the grid's measurements (Spearman's rank correlation)."""
    if tuner.profile is None:
        return [f"{name}: the tuner measured no profile; no prediction to check."]
    findings = PredictionCheck.of(tuner.timings).findings(name)
    measured = [grid.value(c) for c in grid.configs]
    predicted = predict_configs(tuner.profile, grid.configs, budget_bytes).samples_per_s
    usable = [
        i
        for i, (m, p) in enumerate(zip(measured, predicted, strict=True))
        if m > 0 and np.isfinite(p)
    ]
    if len(usable) >= 3:
        rho = float(
            np.corrcoef(
                _ranks([measured[i] for i in usable]), _ranks([float(predicted[i]) for i in usable])
            )[0, 1]
        )
        top = grid.configs[max(usable, key=lambda i: float(predicted[i]))]
        findings.append(
            f"{name}: the profile ranked the grid's {len(usable)} configurations "
            f"with Spearman's rho {rho:.2f} against their measurements; its "
            f"predicted best ({describe(top)}) is number {grid.rank(top)} of the "
            "grid."
        )
    return findings


#: Issue 8's targets: the pick reaches this share of the grid's best ...
TARGET_OF_BEST = 0.95
#: ... in at most this share of the grid's wall time.
TARGET_WALL_SHARE = 0.25


def target_finding(
    name: str,
    relative: float | None,
    wall_share: float,
    best: str = "the grid's best",
    grid: str = "the grid's wall time",
) -> str:
    """Whether the pick met both targets, each said as met or not met with its figure."""

    def met(ok: bool) -> str:
        return "met" if ok else "**NOT met**"

    quality = (
        "no ratio" if relative is None else f"{relative:.2f}x, {met(relative >= TARGET_OF_BEST)}"
    )
    return (
        f"{name}: targets >= {TARGET_OF_BEST:.2f}x {best}: {quality}; <= "
        f"{TARGET_WALL_SHARE:.0%} of {grid}: {wall_share:.1%}, "
        f"{met(wall_share <= TARGET_WALL_SHARE)}."
    )


def section(results: Sequence[WorkloadResults]) -> Section:
    out = Section(
        title="1. Search quality: the tuner against an exhaustive grid",
        intro=(
            "The grid measures every configuration of the reduced space once; its fastest is the "
            "true best. The tuner searches the same space with a budget well under the grid's "
            "size (then confirms its top candidates); where it runs several times (one job per "
            "seed), each job's pick is re-measured and the targets are judged on the median "
            "pick and the median wall time. The picks and the grid's best are re-measured the "
            "same way, interleaved in one session; *pick / best* is the ratio of those medians."
        ),
        columns=[
            "workload",
            "grid: configs, wall",
            "tuner: trials (search + confirm), wall",
            "true best (grid's fastest run)",
            "tuner's pick",
            "pick's grid rank",
            "best, samples/s",
            "pick, samples/s",
            "pick / best",
        ],
    )
    for result in results:
        grid, tuner, comparison = result.grid, result.tuner, result.comparison
        runs = result.tuner_runs or (tuner,)
        for run in runs:
            confirm = run.counts.get("confirm", 0)
            rank = grid.rank(run.config)
            method = tuner_method(run.seed) if result.tuner_runs else TUNER
            label = (
                result.name
                if len(runs) == 1
                else (f"{result.name}, seed {run.seed}" + (" (median)" if run is tuner else ""))
            )
            out.rows.append(
                [
                    label,
                    f"{len(grid.configs)}, {grid.wall_s:.0f} s",
                    f"{run.measured} ({run.measured - confirm} + {confirm}), {run.wall_s:.0f} s",
                    describe(grid.best()),
                    describe(run.config),
                    f"{rank} of {len(grid.configs)}" if rank else "outside the grid",
                    number(comparison.median(GRID_BEST)),
                    number(comparison.median(method)),
                    ratio(comparison.relative(method, GRID_BEST)),
                ]
            )
        relative = comparison.relative(TUNER, GRID_BEST)
        wall_share = result.tuner_wall_s / grid.wall_s
        out.findings.append(target_finding(result.name, relative, wall_share))
        if relative is None:
            out.findings.append(f"{result.name}: a pick failed when re-measured; no ratio.")
        elif relative < 1.0 - TIE:
            how = (
                "clearly (every run of the grid's best beat every run of the pick)"
                if comparison.clearly_apart(TUNER, GRID_BEST)
                else "within the run-to-run spread of this machine"
            )
            out.findings.append(
                f"{result.name}: **the tuner lost to the grid's best** by "
                f"{100 * (1 - relative):.0f}%, {how}; it took {wall_share:.0%} "
                "of the grid's wall time."
            )
        out.findings.extend(prediction_findings(result.name, grid, tuner, result.budget_bytes))
    return out


def default_space_section(results: Sequence[WorkloadResults]) -> Section:
    """The tuner as users run it: default options on the default space, against the grid's best.

    No grid of the default space is measured (thousands of configurations); its wall time is
    estimated from the reduced grid's seconds per configuration, and the reduced grid's best,
    a configuration of the default space too, is the reference the pick must reach.
    """
    out = Section(
        title="1b. The tuner as users run it: default options on the default space",
        intro=(
            "`autotune run` with its default options (search budget, patience, confirmation, "
            "windows) on the tuner's whole default space, which the suite does not narrow; "
            "only the device, the memory budget and the seed are set. No grid of that space is "
            "measured: its wall time is estimated as its size times the reduced grid's mean "
            "seconds per configuration (compiled and larger configurations take longer, so the "
            "estimate is low). The pick is re-measured in the same interleaved session as "
            "section 1; the reference is the reduced grid's best, which lies in the default "
            "space too: reaching it is necessary, not sufficient, for reaching the default "
            "space's best."
        ),
        columns=[
            "workload",
            "default space: configs",
            "tuner: trials (search + confirm), wall",
            "grid of it, estimated",
            "share",
            "tuner's pick",
            "pick, samples/s",
            "reduced grid's best, samples/s",
            "pick / best",
        ],
    )
    for result in results:
        tuner, grid, comparison = result.default_tuner, result.grid, result.comparison
        if tuner is None:
            continue
        confirm = tuner.counts.get("confirm", 0)
        grid_estimate = result.default_space_size * grid.wall_s / max(1, len(grid.configs))
        share = tuner.wall_s / grid_estimate if grid_estimate else float("inf")
        relative = comparison.relative(DEFAULT_SPACE, GRID_BEST)
        out.rows.append(
            [
                result.name,
                f"{result.default_space_size:,}",
                f"{tuner.measured} ({tuner.measured - confirm} + {confirm}), {tuner.wall_s:.0f} s",
                f"{grid_estimate / 3600:,.1f} h",
                f"{share:.1%}",
                describe(tuner.config),
                number(comparison.median(DEFAULT_SPACE)),
                number(comparison.median(GRID_BEST)),
                ratio(relative),
            ]
        )
        out.findings.append(
            target_finding(
                result.name,
                relative,
                share,
                best="the reduced grid's best",
                grid="the default space's grid (estimated)",
            )
        )
        out.findings.extend(PredictionCheck.of(tuner.timings).findings(result.name))
        out.findings.append(f"{result.name}: {tuner.verdict}")
    return out
