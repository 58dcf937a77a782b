"""The job's time budget: how long confirming takes, when the search must stop to leave time
for it, and how many candidates the time left confirms."""

from __future__ import annotations

import statistics
import time

import numpy as np
import numpy.typing as npt

from autotune.measure import MeasurePlan
from autotune.predict import Predictions

#: Configurations a time budget always leaves room to confirm: the best found and the baseline.
MIN_CONFIRM_ENTRIES = 2
#: The share of the job's remaining time (see :meth:`TimeBudget.seconds_left`) one compile may
#: take, in the profile or in a trial: a compile is a one-off cost the job pays in full before
#: it learns anything, so it may spend a quarter of what is left, never the job; with the
#: compiles so far charged against what is left, a default job compiles a few times at most
#: (evidence: ``benchmarks/RESULTS.md``, "Compile within the job's time").
COMPILE_SHARE = 0.25
#: The share of the job's remaining time one trial may be predicted to take, its compile
#: included: a trial tells one point of the space, so however fast it may be it is not worth
#: more of the job than a compile is. A seed or a proposal predicted to step longer is left to
#: the job's end unmeasured: a batch of thousands, stepped by many workers through their
#: warm-up and two rounds each, once took most of a default job (evidence:
#: ``benchmarks/RESULTS.md``, "Compile within the job's time").
TRIAL_SHARE = COMPILE_SHARE
#: Seconds a trial is taken to last before any has run.
TYPICAL_TRIAL_S = 10.0


def trial_seconds(predictions: Predictions, plan: MeasurePlan) -> npt.NDArray[np.float64]:
    """Seconds each predicted configuration's trial steps for at least, at its predicted
    samples/s, with its compile (as the profile timed it; none where unknown): a warm-up of
    ``warmup_steps`` and a step per worker plus one (at least one step, at most
    ``max_warmup_s``), then a window of ``min_steps`` and two rounds of the workers (at least
    ``min_seconds``), as :mod:`autotune.measure` times a trial. A lower bound: starting the
    process and its workers come on top."""
    columns = predictions.columns
    workers = columns.num_workers.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        step_s = columns.batch_size / predictions.samples_per_s
    warm_steps = np.maximum(plan.warmup_steps, workers + 1)
    warm = np.maximum(step_s, np.minimum(plan.max_warmup_s, warm_steps * step_s))
    window = np.maximum(plan.min_seconds, np.maximum(plan.min_steps, 2 * workers) * step_s)
    compiling = np.nan_to_num(predictions.compile_s, nan=0.0)
    return np.asarray(warm + window + compiling, dtype=np.float64)


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
        #: The same less their compiling, and the seconds compiling took in all (the
        #: profile's compiles included).
        self.uncompiled_durations: list[float] = []
        self.compile_spent_s = 0.0

    def spent(self, duration_s: float | None, compile_s: float | None = None) -> None:
        """Note a trial that took ``duration_s`` (None: unknown), ``compile_s`` of it
        compiling; or, without a duration, a compile outside a trial (the profile's)."""
        compiling = compile_s or 0.0
        self.compile_spent_s += compiling
        if duration_s is not None:
            self.durations.append(duration_s)
            self.uncompiled_durations.append(max(0.0, duration_s - compiling))

    def seconds_left(self, trials_left: int, confirm_entries: int) -> float:
        """The job's remaining seconds: what its time budget leaves; without one, what its
        ``trials_left`` trials and the confirmation of ``confirm_entries`` configurations
        would take at the median trial's duration without compiling, less the seconds
        compiling has taken so far.

        A job without a time budget still has a length, its trials': compiling is the one
        cost that does not grow with them, so it is charged against that length.
        """
        if self.seconds is not None:
            return self.started + self.seconds - time.monotonic()
        durations = self.uncompiled_durations
        typical = statistics.median(durations) if durations else TYPICAL_TRIAL_S
        confirm = self.confirm_estimate_s(confirm_entries, typical)
        return typical * trials_left + confirm - self.compile_spent_s

    def compile_allowance_s(self, trials_left: int, confirm_entries: int) -> float:
        """Seconds one compile may take now: :data:`COMPILE_SHARE` of :meth:`seconds_left`."""
        return max(0.0, COMPILE_SHARE * self.seconds_left(trials_left, confirm_entries))

    def trial_allowance_s(self, trials_left: int, confirm_entries: int) -> float:
        """Seconds one trial may be predicted to take now (see :func:`trial_seconds`):
        :data:`TRIAL_SHARE` of :meth:`seconds_left`."""
        return max(0.0, TRIAL_SHARE * self.seconds_left(trials_left, confirm_entries))

    def confirm_estimate_s(self, entries: int, typical: float | None = None) -> float:
        """Seconds to confirm ``entries`` configurations (the baseline included), each trial
        taking ``typical`` seconds (by default the median so far)."""
        if typical is None:
            typical = statistics.median(self.durations) if self.durations else TYPICAL_TRIAL_S
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
