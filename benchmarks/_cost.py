"""Section 4, cost: the tuner's fixed overhead per trial, and how its time grows with the budget."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autotune.store import Database
from benchmarks._harness import WorkloadContext
from benchmarks._report import Section, number, percent
from benchmarks._tuner import TunerOutcome, tune

if TYPE_CHECKING:
    from benchmarks._results import WorkloadResults


@dataclass(frozen=True)
class Overhead:
    """Where a tuning job's wall time went."""

    wall_s: float
    trial_s: float
    window_s: float
    #: Mean of (trial process duration - timed window) over trials that finished their window.
    per_trial_s: float | None
    processes: int

    @classmethod
    def of(cls, tuner: TunerOutcome) -> Overhead:
        windowed = [t for t in tuner.timings if t.window_s is not None]
        per_trial = (
            statistics.fmean(t.duration_s - (t.window_s or 0.0) for t in windowed)
            if windowed
            else None
        )
        return cls(
            wall_s=tuner.wall_s,
            trial_s=sum(t.duration_s for t in tuner.timings),
            window_s=sum(t.window_s or 0.0 for t in windowed),
            per_trial_s=per_trial,
            processes=len(tuner.timings),
        )

    @property
    def fixed_fraction(self) -> float | None:
        """Per-trial fixed overhead (start, build, warm-up, teardown) over the tuning time."""
        if self.per_trial_s is None or not self.wall_s:
            return None
        return self.per_trial_s * self.processes / self.wall_s


def growth(ctx: WorkloadContext, db: Database, budgets: Sequence[int]) -> list[TunerOutcome]:
    """Extra tuning jobs at other trial budgets, timed the same way."""
    return [tune(ctx, db, n_trials) for n_trials in budgets]


def _fit(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """Least-squares wall = a + b * trial processes."""
    if len({x for x, _ in points}) < 2:
        return None
    slope, intercept = statistics.linear_regression([x for x, _ in points], [y for _, y in points])
    return intercept, slope


def section(
    results: Sequence[WorkloadResults], grown: Sequence[TunerOutcome], growth_workload: str
) -> Section:
    out = Section(
        title="4. Cost of tuning",
        intro=(
            "Where the tuner's wall time goes. *Fixed overhead per trial* is a trial process's "
            "duration minus its timed window (process start, imports, model and loader build, "
            "warm-up, teardown), averaged over trials that ran their full window; its share is "
            "that overhead times the trial processes over the whole tuning time. *Other* is "
            "time outside trial processes (probe, Optuna, database)."
        ),
        columns=[
            "workload",
            "search trials",
            "trial processes",
            "tuning wall",
            "timed windows",
            "fixed overhead per trial",
            "fixed overhead share",
            "other",
        ],
    )
    outcomes = [(r.name, r.tuner) for r in results]
    outcomes += [(growth_workload, t) for t in grown]
    for name, tuner in outcomes:
        cost = Overhead.of(tuner)
        out.rows.append(
            [
                name,
                str(tuner.n_trials),
                str(cost.processes),
                f"{cost.wall_s:.0f} s",
                f"{cost.window_s:.0f} s ({percent(cost.window_s / cost.wall_s)})",
                f"{number(cost.per_trial_s, 1)} s",
                percent(cost.fixed_fraction),
                f"{cost.wall_s - cost.trial_s:.0f} s",
            ]
        )
    points = [(t.measured, t.wall_s) for name, t in outcomes if name == growth_workload]
    fit = _fit(points)
    if fit is not None:
        intercept, slope = fit
        confirm = max(t.counts.get("confirm", 0) for name, t in outcomes if name == growth_workload)
        out.findings.append(
            f"{growth_workload}: tuning time is about {intercept:.0f} s + {slope:.1f} s per trial "
            f"process (least squares over {len(points)} trial budgets); each also pays for "
            f"{confirm} confirmation processes."
        )
    shares = [f for _, t in outcomes if (f := Overhead.of(t).fixed_fraction) is not None]
    if shares:
        out.findings.append(
            f"Fixed per-trial overhead is {percent(min(shares))} to {percent(max(shares))} of "
            f"tuning time with {'these short' if max(shares) > 0.5 else 'these'} windows."
        )
    return out
