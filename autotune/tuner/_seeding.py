"""Seeding the search from the profile: the configurations queued before the sampler's own.

The predicted best few, the twins on the other side of what the profile times apart (the
step's threads beside workers, loading in the main process or in workers), the predicted best
that keeps the user's effective batch, a precision read close to the best, and the most
uncertain few: each a trial the profile cannot settle alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from autotune.measure import MeasurePlan
from autotune.predict import Predictions
from autotune.search import CEILING_SHARE
from autotune.space import Config, SearchSpace
from autotune.tuner._budget import trial_seconds
from autotune.tuner._judges import MIN_COMPILE_GAIN, SLOW_SHARE

#: Predicted-best and most-uncertain configurations queued after the baseline and checklist,
#: at most; fewer when the trial budget is small, so the sampler still gets turns.
PREDICTED_BEST = 3
MOST_UNCERTAIN = 2
#: The most uncertain are picked among this share of the fastest predictions: exploring where
#: the profile is blind pays only where it might be fast.
UNCERTAIN_AMONG_SHARE = 0.25
PREDICTED_PHASE = "predicted"

#: The knobs the profile measures. Configurations that differ only in others (prefetch,
#: persistence, pinning, compile, ...) are predicted alike, so the predicted best are taken one
#: per combination of these: three prefetch variants of one configuration would spend the
#: seeds on one point of what the profile knows.
PROFILED_KNOBS = ("batch_size", "num_workers", "amp", "channels_last")

#: A precision whose predicted best reaches this share of the best predicted anywhere is
#: measured once, its best, where the predicted best seeds hold none of it: within the
#: spread of the profile's reading of one precision against another.
CLOSE_PRECISION_SHARE = 0.9


def _profiled_point(values: Mapping[str, Any]) -> tuple[Any, ...]:
    """The point of the profile a configuration's ``values`` run at."""
    return tuple(values[name] for name in PROFILED_KNOBS)


class _Seeds:
    """The seeds chosen so far, and what they already cover: the configurations queued, the
    points of the profile they run at, and the knobs the uncertain seeds explore."""

    def __init__(self, predictions: Predictions, space: SearchSpace, queued: list[Config]):
        self.predictions = predictions
        self.space = space
        self.chosen: list[Config] = []
        self.seen = {config.key() for config in queued}
        # Points of the profile already queued (the baseline's, the checklist's) count as
        # covered.
        self.profiled = {
            tuple(getattr(config, name) for name in PROFILED_KNOBS) for config in queued
        }
        #: The knobs the profile did not run that the uncertain seeds taken so far explore.
        self.explored: set[str] = set()

    def add(self, config: Config) -> None:
        """Queue ``config`` unless it is queued already."""
        if config.key() not in self.seen:
            self.seen.add(config.key())
            self.chosen.append(config)

    def take(
        self,
        indices: Iterable[int],
        count: int,
        distinct_profiled: bool = False,
        distinct_uncovered: bool = False,
    ) -> int:
        """Queue up to ``count`` of the predicted configurations ``indices`` (with
        ``distinct_profiled``, none at a point of the profile covered already; with
        ``distinct_uncovered``, none turning a knob away from what the profile ran that
        another seed explores); returns how many it queued."""
        taken = 0
        for index in indices:
            if taken >= count:
                break
            uncovered = self.predictions.uncovered_knobs(index) if distinct_uncovered else set()
            if uncovered & self.explored:
                continue
            values = self.predictions.values(index)
            point = _profiled_point(values)
            if distinct_profiled and point in self.profiled:
                continue
            config = self.space.config_from(values)
            if config.key() in self.seen:
                continue
            self.seen.add(config.key())
            self.profiled.add(point)
            self.explored.update(uncovered)
            self.chosen.append(config)
            taken += 1
        return taken


@dataclasses.dataclass(frozen=True)
class SeedBounds:
    """What a seed may cost the job: the user's run its compile must repay (samples; None:
    unknown), the seconds one compile may take, the seconds one trial may be predicted to
    take (see :func:`~autotune.tuner._budget.trial_seconds`) under the search's ``plan``,
    and each configuration's eager twin's predicted samples/s, which a compiled one must beat
    by :data:`MIN_COMPILE_GAIN` over the run (None: not compared)."""

    run_samples: int | None = None
    compile_allowance_s: float | None = None
    plan: MeasurePlan | None = None
    trial_allowance_s: float | None = None
    eager_samples_per_s: npt.NDArray[np.float64] | None = None


def seedable(predictions: Predictions, bounds: SeedBounds) -> Predictions:
    """``predictions`` as the seeds read them: over a run of ``bounds.run_samples`` (each
    compile's seconds charged once, see :meth:`Predictions.over_run`), with these left out as
    if over memory: the compiled configurations the profile did not time, those whose compile
    takes over the compile allowance, those predicted to gain under :data:`MIN_COMPILE_GAIN`
    over the run on their eager twins, those whose batch the step sweep did not reach, and
    those whose trial is predicted to take over the trial allowance.

    A compile is paid in full before a trial learns anything, and a batch past the sweep is
    predicted at the largest timed batch's rate, a guess: seeding either blind, or a trial of
    a batch of thousands stepped by many workers, spent most of a default job on one trial
    (evidence: ``benchmarks/RESULTS.md``, "Compile within the job's time"). The search may
    still propose them, each judged by what it is then known to cost.
    """
    compiled = predictions.columns.compile > 0
    compile_s = predictions.compile_s
    left_out = (compiled & np.isnan(compile_s)) | ~predictions.step_timed
    if bounds.compile_allowance_s is not None:
        left_out |= compiled & (np.nan_to_num(compile_s, nan=0.0) > bounds.compile_allowance_s)
    if bounds.plan is not None and bounds.trial_allowance_s is not None:
        left_out |= trial_seconds(predictions, bounds.plan) > bounds.trial_allowance_s
    over_run = predictions.over_run(bounds.run_samples)
    if bounds.eager_samples_per_s is not None:
        gains = over_run >= (1.0 + MIN_COMPILE_GAIN) * bounds.eager_samples_per_s
        left_out |= compiled & ~gains
    return dataclasses.replace(
        predictions, samples_per_s=over_run, over_memory=predictions.over_memory | left_out
    )


def seed_configs(
    predictions: Predictions,
    space: SearchSpace,
    n_trials: int,
    already: Iterable[Config],
    keeping_batch: int | None = None,
    bounds: SeedBounds | None = None,
) -> list[Config]:
    """The predicted best few (one per combination of :data:`PROFILED_KNOBS`), the predicted
    best that keeps the effective batch ``keeping_batch`` (a batch size dividing it, for the
    drop-in answer), the best of each precision read close to the best that none of these
    runs in (see :func:`_close_precisions`; each in place of an uncertain seed), then the most
    uncertain few (no two turning the same knob away from what the profile ran), none
    predicted over memory and none already queued; all ranked over the user's run, none that
    costs more than ``bounds`` allow or that the profile did not time (see
    :func:`seedable`)."""
    predictions = seedable(predictions, bounds or SeedBounds())
    room = max(0, n_trials - 2)
    best_count = min(PREDICTED_BEST, max(1, room // 3))
    uncertain_count = min(MOST_UNCERTAIN, room // 5)
    seeds = _Seeds(predictions, space, list(already))
    # Enough of the ranking to find the best few distinct points past the variants of each.
    ranked = predictions.best(len(predictions))
    seeds.take(ranked, best_count, distinct_profiled=True)
    for twin in _contention_twins(predictions, space):
        if len(seeds.chosen) < room:
            seeds.add(twin)
    if (
        keeping_batch is not None
        and len(seeds.chosen) < room
        and not any(keeping_batch % config.batch_size == 0 for config in seeds.chosen)
    ):
        # The drop-in answer is the fastest measured configuration that keeps the user's
        # effective batch: without this seed only the search's detours reach one, where the
        # profile predicts a larger batch near the best.
        keeps = keeping_batch % predictions.columns.batch_size == 0
        seeds.take((index for index in ranked if keeps[index]), 1)
    # A precision read close to the best that no seed runs in is a prediction as uncertain as
    # any: it takes the place of an uncertain seed, so the seeds cost no more trials.
    for index in _close_precisions(predictions, ranked, seeds.chosen):
        if len(seeds.chosen) < room:
            uncertain_count = max(0, uncertain_count - seeds.take([index], 1))
    among = max(1, int(len(predictions) * UNCERTAIN_AMONG_SHARE))
    # Each explores knobs the profile did not run that no other does: compile is the least
    # known knob, so the most uncertain are otherwise all compiled variants, and a second
    # compiled seed only re-learns what the first showed.
    seeds.take(
        predictions.most_uncertain(among, among=among), uncertain_count, distinct_uncovered=True
    )
    return seeds.chosen


def _close_precisions(
    predictions: Predictions, ranked: Sequence[int], seeded: Sequence[Config]
) -> list[int]:
    """The predicted best of each precision (``amp``) that none of ``seeded`` runs in, where
    it reaches :data:`CLOSE_PRECISION_SHARE` of the best predicted; ``ranked`` is
    :meth:`Predictions.best` of every configuration (those that fit, fastest first).

    The profile times each precision's sweep in its own seconds of a machine whose speed
    moves, so two precisions read within that spread are ordered by chance: seeding only the
    first let a search end at the ceiling the slower-read precision set, and recommend a
    configuration a fifth slower than the other precision's best (evidence:
    ``benchmarks/log/``). A precision read that close is measured once, in place of one of the
    most uncertain seeds (see :func:`seed_configs`).
    """
    if not ranked:
        return []
    bar = CLOSE_PRECISION_SHARE * float(predictions.samples_per_s[ranked[0]])
    have = {config.amp for config in seeded}
    order = np.asarray(ranked)
    # The first of each precision in the ranking is its best.
    _, firsts = np.unique(predictions.columns.amp[order], return_index=True)
    picked = []
    for index in (int(order[first]) for first in sorted(firsts)):
        if predictions.values(index)["amp"] not in have and predictions.samples_per_s[index] >= bar:
            picked.append(index)
    return picked


def _contention_twins(predictions: Predictions, space: SearchSpace) -> list[Config]:
    """The predicted best on the space's other intra-op thread counts, where it has workers,
    and on a CPU device its twin on the other side of loading: without workers where it has
    them, with the fastest predicted worker count where it has none.

    The profile times the step's threads with the cores to itself; beside busy workers a step
    on every core and the workers wait on each other, which no part timed alone shows, and
    whether loading in the main process beats workers sharing the step's cores is what it
    knows least well, both ways. Only a trial tells, so each twin is measured, unless the
    profile rules it out by far (under :data:`SLOW_SHARE` of the best, the bar a proposal of
    the sampler must clear).

    Workers can take from a step no more than its loading in the main process: where the best
    without them comes within the search's ceiling (:data:`CEILING_SHARE`) of what its step
    reaches alone, receiving its batches from workers, the twin with workers cannot beat it
    beyond a trial's spread and is not measured (evidence: ``benchmarks/RESULTS.md``).
    """
    best = predictions.best(1)
    if not best:
        return []
    config = space.config_from(predictions.values(best[0]))
    twins = [
        config.model_copy(update={"intra_op_threads": t})
        for t in space.choices["intra_op_threads"]
        if config.num_workers and t != config.intra_op_threads
    ]
    if space.device.is_cuda:
        return twins
    other = _fastest_other_loading(predictions, best[0])
    rate = predictions.samples_per_s[best[0]]
    if other is None or predictions.samples_per_s[other] < SLOW_SHARE * rate:
        return twins
    if config.num_workers:
        twins.append(config.model_copy(update={"num_workers": 0}).normalized())
    elif rate < CEILING_SHARE * predictions.step_samples_per_s[other]:
        twins.append(space.config_from(predictions.values(other)))
    return twins


def _fastest_other_loading(predictions: Predictions, index: int) -> int | None:
    """The configuration predicted fastest among those that set the profiled knobs but the
    worker count and the step's threads as ``index`` does and load on the other side: without
    workers where ``index`` has them, with workers where it has none (None where the space
    has no such configuration that fits its memory)."""
    c = predictions.columns
    same = (c.num_workers == 0) != (c.num_workers[index] == 0)
    for name in (*PROFILED_KNOBS, "intra_op_threads"):
        if name != "num_workers":
            column = getattr(c, name)
            same &= column == column[index]
    rate = predictions.samples_per_s
    same &= ~predictions.over_memory & np.isfinite(rate)
    return int(np.argmax(np.where(same, rate, -np.inf))) if same.any() else None
