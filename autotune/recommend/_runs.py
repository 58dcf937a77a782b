"""The confirmation's runs: each configuration's re-measured runs, the race's verdict, and the
paired statistics that compare a configuration with another round by round.

Two runs are compared only within one round (paired), so that a drift of the machine's speed
between rounds falls on both alike.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from autotune.space import Config
from autotune.store import TrialRecord


@dataclass
class CandidateRuns:
    """One configuration's confirmation runs, one per round it raced in."""

    config: Config
    runs: list[TrialRecord] = field(default_factory=list)
    #: Samples in the user's run, which each run's compile time is charged against.
    run_samples: int | None = None
    #: The round after which the candidate left the race, and why; None while it is in it.
    left_after_round: int | None = None
    left_because: str | None = None

    @property
    def finished(self) -> bool:
        """Ran every round: only such a candidate can be picked."""
        return self.left_after_round is None

    @property
    def usable(self) -> bool:
        """Every confirmation run finished ok, finite and within the budget."""
        return bool(self.runs) and all(run.usable for run in self.runs)

    @property
    def median_samples_per_s(self) -> float:
        """Steady-state throughput, compile time left out."""
        return statistics.median(run.samples_per_s or 0.0 for run in self.runs)

    @property
    def median_run_samples_per_s(self) -> float:
        """Throughput over the user's run, compile time included: what candidates are
        ranked by."""
        return statistics.median(self.over_run(run) for run in self.runs)

    def over_run(self, run: TrialRecord) -> float:
        return run.samples_per_s_over(self.run_samples) or 0.0

    def median_of(self, name: str) -> float | None:
        values = [getattr(run, name) for run in self.runs if getattr(run, name) is not None]
        return statistics.median(values) if values else None

    def max_of(self, name: str) -> int | None:
        values = [getattr(run, name) for run in self.runs if getattr(run, name) is not None]
        return max(values) if values else None


@dataclass
class Confirmation:
    """The re-measured candidates and the verdict."""

    baseline: CandidateRuns
    candidates: list[CandidateRuns]
    winner: CandidateRuns
    #: Per-round ratios winner / baseline (paired: measured in the same round).
    paired_ratios: list[float]
    #: Paired rounds the tie-break added (0 when the first winner beat the baseline in every
    #: round, or was the baseline); and the first winner it measured, kept or not (None
    #: without a tie-break).
    tie_break_rounds: int = 0
    tie_break_candidate: CandidateRuns | None = None
    #: Rounds the race ran (before any tie-break), of the most it could run, and why it ended
    #: before them (None when it ran them all).
    rounds_run: int = 0
    rounds_planned: int = 0
    decided_because: str | None = None
    #: Why the race ran a round it would have skipped (None when it did not).
    added_round_because: str | None = None

    @property
    def speedup(self) -> float | None:
        """Over the user's run, compile time included."""
        if not self.baseline.usable:
            return None
        return self.winner.median_run_samples_per_s / self.baseline.median_run_samples_per_s

    def ratios_of(self, entry: CandidateRuns) -> list[float]:
        """``entry`` / baseline per round (paired), over the user's run."""
        return paired_ratios(entry, self.baseline)

    def rounds_won(self, entry: CandidateRuns) -> int:
        """Paired rounds in which ``entry`` ran faster than the baseline."""
        return rounds_won(self.ratios_of(entry))

    @property
    def lost_tie_break(self) -> CandidateRuns | None:
        """The first winner, when its tie-break against the baseline showed it not reliably
        faster: no answer may recommend it."""
        tried = self.tie_break_candidate
        return tried if tried is not None and tried is not self.winner else None

    @property
    def within_noise(self) -> bool:
        """The winner did not beat the baseline in every round: the gain may be noise."""
        return (
            self.winner is self.baseline or not self.paired_ratios or min(self.paired_ratios) <= 1.0
        )


def paired_ratios(entry: CandidateRuns, baseline: CandidateRuns) -> list[float]:
    """``entry`` / ``baseline`` per round, over the user's run (paired within each round)."""
    return [
        entry.over_run(mine) / baseline.over_run(theirs)
        for mine, theirs in zip(entry.runs, baseline.runs, strict=True)
        if baseline.over_run(theirs)
    ]


def rounds_won(ratios: Sequence[float]) -> int:
    """Rounds whose ratio says the entry ran faster than what it was paired with."""
    return sum(ratio > 1.0 for ratio in ratios)


def reliably_faster(winner: CandidateRuns, baseline: CandidateRuns) -> bool:
    """Faster than the baseline in more than half of the paired rounds, and on the median."""
    ratios = paired_ratios(winner, baseline)
    return (
        2 * rounds_won(ratios) > len(ratios)
        and winner.median_run_samples_per_s > baseline.median_run_samples_per_s
    )


def clearly_ahead(entry: CandidateRuns, baseline: CandidateRuns, margin: float) -> bool:
    """More than ``margin`` faster than ``baseline`` in every round (paired); True where the
    baseline's runs are not usable (nothing to compare with)."""
    return not baseline.usable or all(
        ratio > 1 + margin for ratio in paired_ratios(entry, baseline)
    )


def behind(entry: CandidateRuns, leader: CandidateRuns | None, margin: float) -> bool:
    """Slower than ``leader`` by more than ``margin`` in every round both ran (paired)."""
    if leader is None or leader is entry:
        return False
    return all(
        entry.over_run(mine) < (1 - margin) * leader.over_run(theirs)
        for mine, theirs in zip(entry.runs, leader.runs, strict=True)
    )


def front(entries: Sequence[CandidateRuns]) -> list[CandidateRuns]:
    """The entries of ``entries`` that no other ran faster than in every round (paired).

    The fastest by the median is always among them (a candidate outrun in every round has
    the lower median too); where there are several, each ran at least as fast as every other
    in some round.
    """
    return [entry for entry in entries if not any(behind(entry, other, 0.0) for other in entries)]


def fastest(entries: Sequence[CandidateRuns]) -> CandidateRuns | None:
    """The entry with the highest median throughput over the user's run."""
    return max(entries, key=lambda entry: entry.median_run_samples_per_s, default=None)


def run_spread(entry: CandidateRuns) -> float:
    """The fastest of ``entry``'s runs over its slowest, over the user's run."""
    speeds = [entry.over_run(run) for run in entry.runs]
    return max(speeds) / min(speeds) if min(speeds) > 0 else float("inf")
