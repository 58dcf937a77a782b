"""Hooks through which a running job tells its face (CLI progress, worker) what happens."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.predict import Profile
    from autotune.runner import ProbeResult
    from autotune.space import Config, SearchSpace
    from autotune.store import Job, Trial


class Reporter:
    """Does nothing; subclass and override what you want to show."""

    def job_started(self, job: Job, probe: ProbeResult, space: SearchSpace) -> None:
        """The workload was probed and the space is known."""

    def measurement_set_started(self, measurement_set: int, changes: list[str]) -> None:
        """The job resumed on hardware or software that changed (``changes``, e.g.
        ``torch 2.12.0 -> 2.13.0``): it measures anew in ``measurement_set``."""

    def profiled(self, profile: Profile) -> None:
        """The job's profile was measured (or read back on resume)."""

    def profile_failed(self, reason: str) -> None:
        """No profile could be measured; the job searches without one."""

    def phase_started(self, phase: str, total: int) -> None:
        """``search`` (``total`` trials to measure) or ``confirm`` (``total`` re-measurements)."""

    def trial_started(self, phase: str, config: Config) -> None:
        """A trial process is about to start."""

    def trial_finished(self, trial: Trial) -> None:
        """A trial was measured and stored."""

    def candidate_left(
        self, config: Config, after_round: int, runs_saved: int, reason: str
    ) -> None:
        """A confirmation candidate left the race after ``after_round`` rounds (``reason``);
        the confirmation runs ``runs_saved`` fewer re-measurements."""

    def race_decided(self, rounds: int, runs_saved: int, reason: str) -> None:
        """The confirmation ended after ``rounds`` rounds, before its last, its answers
        decided (``reason``): ``runs_saved`` fewer re-measurements."""

    def round_added(self, round_number: int, runs_added: int, reason: str) -> None:
        """The confirmation runs round ``round_number``, which it would have skipped
        (``reason``): ``runs_added`` re-measurements beyond those planned (0 where the round
        was planned and the race would have ended before it)."""

    def tie_break_started(self, config: Config, rounds: int) -> None:
        """The confirmation's winner did not beat the baseline every round: the two run
        ``rounds`` more paired rounds."""

    def trial_skipped(self, config: Config, reason: str) -> None:
        """A configuration was ruled out without running it."""

    def job_finished(self, job: Job) -> None:
        """The job reached a final state."""
