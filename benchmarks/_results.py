"""Everything the suite measured on one workload, handed to each section's table."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks._alternatives import Alternative, RandomDraw
from benchmarks._harness import Comparison
from benchmarks._quality import QualityOutcome
from benchmarks._search_quality import GridOutcome
from benchmarks._tuner import TunerOutcome, median_wall_s


@dataclass(frozen=True)
class WorkloadResults:
    name: str
    grid: GridOutcome
    tuner: TunerOutcome
    alternatives: list[Alternative]
    #: The tuner's pick, the grid's best and every alternative, re-measured in one session.
    comparison: Comparison
    quality: QualityOutcome
    #: The memory budget every trial was held to (the tuner's too).
    budget_bytes: int | None = None
    #: Optuna's random sampler given the tuner's wall time, one draw per seed.
    random_draws: tuple[RandomDraw, ...] = ()
    #: The tuner with its default options on the default space, and that space's size.
    default_tuner: TunerOutcome | None = None
    default_space_size: int = 0
    #: Section 1's tuner jobs, one per seed; ``tuner`` is the one whose pick is their median
    #: (``benchmarks._tuner.median_run``), and the comparison names it ``TUNER`` too.
    tuner_runs: tuple[TunerOutcome, ...] = ()

    @property
    def tuner_wall_s(self) -> float:
        """The median wall time of section 1's tuner jobs: random search's budget."""
        return median_wall_s(self.tuner_runs or (self.tuner,))
