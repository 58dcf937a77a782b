"""The job's time budget: how long confirming takes, when the search must stop to leave time
for it, and how many candidates the time left confirms."""

from __future__ import annotations

import statistics
import time

from autotune.measure import MeasurePlan

#: Configurations a time budget always leaves room to confirm: the best found and the baseline.
MIN_CONFIRM_ENTRIES = 2


def confirm_room(seconds_left: float, seconds_per_entry: float) -> int:
    """Candidates beside the baseline whose confirmation ``seconds_left`` covers, each entry
    taking ``seconds_per_entry`` over all its rounds; at least one (the best found)."""
    return max(MIN_CONFIRM_ENTRIES - 1, int(seconds_left // seconds_per_entry) - 1)


class TimeBudget:
    """The seconds a job may take from now (None: no limit), and the trials' durations that
    tell how long its confirmation will take."""

    def __init__(
        self,
        seconds: float | None,
        search_plan: MeasurePlan,
        confirm_plan: MeasurePlan,
        confirm_rounds: int,
    ) -> None:
        self.seconds = seconds
        self.started = time.monotonic()
        self.search_plan = search_plan
        self.confirm_plan = confirm_plan
        self.confirm_rounds = confirm_rounds
        #: Seconds each trial process of this run took.
        self.durations: list[float] = []

    def confirm_estimate_s(self, entries: int) -> float:
        """Seconds to confirm ``entries`` configurations (the baseline included)."""
        typical = statistics.median(self.durations) if self.durations else 10.0
        # A confirmation run lasts a search trial plus its longer window (at least).
        longer = max(0.0, self.confirm_plan.min_seconds - self.search_plan.min_seconds)
        return (typical + longer) * entries * self.confirm_rounds

    def confirm_room(self) -> int | None:
        """Candidates the time budget leaves room to confirm beside the baseline (at least
        one); None without a budget."""
        if self.seconds is None:
            return None
        seconds_left = self.started + self.seconds - time.monotonic()
        return confirm_room(seconds_left, self.confirm_estimate_s(1))

    def search_over(self) -> bool:
        """Whether the search must end to leave time to confirm the best found.

        The baseline (the first measurement) runs whatever the budget: without it there is
        nothing to recommend against, and a budget shorter than the confirmation's estimate
        would otherwise end the job before it measured anything. The search then goes on while
        the time left covers confirming the best found beside the baseline, and the
        confirmation takes as many candidates as the time left covers: reserving time for
        every candidate would end a short job after its baseline.
        """
        if self.seconds is None or not self.durations:
            return False
        return time.monotonic() + self.confirm_estimate_s(MIN_CONFIRM_ENTRIES) >= (
            self.started + self.seconds
        )
