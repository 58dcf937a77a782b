"""Confirmation: re-measure the best candidates and the baseline, interleaved, pick by median."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from autotune.space import Config
from autotune.store import TrialRecord

#: Runs one configuration in a fresh process; None when the job was cancelled meanwhile.
ConfirmFn = Callable[[Config], TrialRecord | None]


@dataclass
class CandidateRuns:
    config: Config
    runs: list[TrialRecord] = field(default_factory=list)
    #: Samples in the user's run, which each run's compile time is charged against.
    run_samples: int | None = None

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

    @property
    def speedup(self) -> float | None:
        """Over the user's run, compile time included."""
        if not self.baseline.usable:
            return None
        return self.winner.median_run_samples_per_s / self.baseline.median_run_samples_per_s

    @property
    def within_noise(self) -> bool:
        """The winner did not beat the baseline in every round: the gain may be noise."""
        return self.winner is self.baseline or not self.paired_ratios or min(
            self.paired_ratios) <= 1.0


def pick_candidates(
    measured: Sequence[TrialRecord], baseline: Config, top: int, run_samples: int | None = None
) -> list[Config]:
    """The ``top`` fastest distinct usable configurations other than the baseline, by their
    throughput over a run of ``run_samples`` samples (compile time included)."""

    def speed(run: TrialRecord) -> float:
        return run.samples_per_s_over(run_samples) or 0.0

    best: dict[str, TrialRecord] = {}
    for run in measured:
        if not run.usable or run.config.key() == baseline.key():
            continue
        key = run.config.key()
        if key not in best or speed(run) > speed(best[key]):
            best[key] = run
    ranked = sorted(best.values(), key=speed, reverse=True)
    return [run.config for run in ranked[:top]]


def confirm(
    baseline: Config,
    candidates: Sequence[Config],
    rounds: int,
    measure: ConfirmFn,
    run_samples: int | None = None,
) -> Confirmation | None:
    """Measure baseline and candidates ``rounds`` times each in fresh processes.

    Each round runs every configuration once, in an order rotated from the round before, so
    slow drifts of the machine (thermal, other load) fall on all of them alike. The winner is
    picked by its median throughput over a run of ``run_samples`` samples, compile time
    included. Returns None when cancelled.
    """
    entries = [CandidateRuns(config, run_samples=run_samples)
               for config in (baseline, *candidates)]
    for round_index in range(rounds):
        shift = round_index % len(entries)
        for entry in entries[shift:] + entries[:shift]:
            run = measure(entry.config)
            if run is None:
                return None
            entry.runs.append(run)
    base, others = entries[0], entries[1:]
    usable = [entry for entry in others if entry.usable]
    winner = max(usable, key=lambda entry: entry.median_run_samples_per_s, default=base)
    if base.usable and winner.median_run_samples_per_s <= base.median_run_samples_per_s:
        winner = base
    ratios = []
    if winner is not base and base.usable:
        ratios = [
            winner.over_run(w) / base.over_run(b)
            for w, b in zip(winner.runs, base.runs, strict=True)
            if base.over_run(b)
        ]
    return Confirmation(baseline=base, candidates=others, winner=winner, paired_ratios=ratios)
