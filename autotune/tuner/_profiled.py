"""The profile's part of a job: measure it once (or reuse the stored one), predict every
configuration, and seed the search with the predicted best and the least known."""

from __future__ import annotations

import itertools
import math
import statistics
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

from autotune.measure import ProfilePlan
from autotune.predict import Predictions, Profile, predict_configs, predict_space, ranking
from autotune.runner import ProfileFailed, TrialCancelled, probe_workload, profile_workload
from autotune.search import CEILING_SHARE
from autotune.space import Config, SearchSpace
from autotune.store import Database, Job, device_lock, lock_owned_job, throughput_over_run

#: Predicted-best and most-uncertain configurations queued after the baseline and checklist,
#: at most; fewer when the trial budget is small, so the sampler still gets turns.
PREDICTED_BEST = 3
MOST_UNCERTAIN = 2
#: The most uncertain are picked among this share of the fastest predictions: exploring where
#: the profile is blind pays only where it might be fast.
UNCERTAIN_AMONG_SHARE = 0.25
PREDICTED_PHASE = "predicted"


class ProfileCancelled(Exception):
    """The job was cancelled while its profile was measured."""


def profile_plan(
    space: SearchSpace, memory_budget_bytes: int | None, host_budget: bool, seconds: float
) -> ProfilePlan:
    """What to profile: the space's batches, precisions, layouts, worker counts and step
    thread counts."""
    choices = space.choices
    batches = choices["batch_size"]
    loader_batch = min(space.baseline().batch_size, max(batches))
    effective = space.baseline().effective_batch
    return ProfilePlan(
        batch_sizes=list(batches),
        amp_modes=list(choices["amp"]),
        channels_last=list(choices["channels_last"]),
        worker_counts=list(choices["num_workers"]),
        loader_batch_size=loader_batch,
        memory_budget_bytes=memory_budget_bytes if host_budget else None,
        # A count beyond the grid could never be tried where the user ranged num_workers.
        extend_workers=space.takes_extra_workers and len(choices["num_workers"]) > 1,
        step_budget_s=seconds / 2,
        loader_budget_s=seconds / 2,
        retain_freed_memory=True in choices["retain_freed_memory"],
        fresh_heap=False in choices["retain_freed_memory"],
        intra_op_threads=[t for t in choices["intra_op_threads"] if t is not None],
        fork_copy=(
            max(choices["num_workers"]) > 0
            and False in choices["persistent_workers"]
            and True in choices["retain_freed_memory"]
        ),
        accumulation=any(batch < effective and effective % batch == 0 for batch in batches),
    )


def stored_profile(job: Job) -> Profile | str | None:
    """The job's stored profile; the reason profiling failed; None when none was measured."""
    if not job.profile:
        return None
    if "error" in job.profile:
        return str(job.profile["error"])
    return Profile.model_validate(job.profile)


def measure_profile(
    db: Database,
    job_id: int,
    owner: str | None,
    lock_key: str,
    workload: str,
    device: str,
    plan: ProfilePlan,
    timeout_s: float,
    memory_budget_bytes: int | None,
    host_budget: bool,
    cancel: threading.Event,
) -> Profile | str:
    """Profile in a fresh process under the device lock and store the result on the job.

    Returns the profile, or the reason it could not be measured (the job then searches without
    one). Raises :class:`ProfileCancelled` when the job is cancelled meanwhile.
    """
    result: Profile | str
    with device_lock(db, lock_key, cancel) as held:
        if not held:
            raise ProfileCancelled
        try:
            result = profile_workload(
                workload,
                device,
                plan,
                timeout_s + plan.step_budget_s + plan.loader_budget_s,
                memory_budget_bytes=memory_budget_bytes,
                budget_is_host_memory=host_budget,
                cancel=cancel,
            )
        except TrialCancelled:
            raise ProfileCancelled from None
        except ProfileFailed as exc:
            result = str(exc)
    with db.session(immediate=True) as session:
        job = lock_owned_job(session, job_id, owner)
        job.profile = (
            {"error": result} if isinstance(result, str) else result.model_dump(mode="json")
        )
    return result


@dataclass(frozen=True)
class Predictor:
    """The profile's predictions for one job's space and memory budget."""

    profile: Profile
    space: SearchSpace
    memory_budget_bytes: int | None

    def all(self) -> Predictions:
        """Every configuration of the space, predicted (once)."""
        return self._of_space

    def samples_per_s(self, config: Config) -> float | None:
        """The predicted samples/s of one configuration (on the grid or off it)."""
        return self._predicted(config)[0]

    def reach(self, config: Config) -> float | None:
        """The most samples/s the profile allows ``config``: its prediction raised by twice
        its uncertainty (:data:`REACH_UNCERTAINTIES`)."""
        value, uncertainty = self._predicted(config)
        return None if value is None else value * (1 + REACH_UNCERTAINTIES * uncertainty)

    def scale(self, config: Config, measured: Sequence[tuple[Config, float]]) -> float | None:
        """The scale the job's trials ran at, for ``config``: the median measured / predicted
        of ``measured`` other than ``config``'s own runs, among those that handle freed memory
        and load as it does (see :func:`measured_scales`). None before any such trial, and where
        ``config`` sets a knob the profile's eager step does not time (its gain is no error of
        the profile's scale, :data:`UNSCALED_KNOBS`).

        The profile reads each point as the faster of two windows of a fraction of a second,
        in one moment: on a 2-core EPYC the faster of two read a median 1.12-1.17 of a 3 s
        window timed right after it (benchmarks/RESULTS.md 1b), and the default jobs' search
        trials came in at a median 0.78-0.90 of the profile's predictions. The trials before
        a configuration tell that scale; its own runs are left out, so its prediction is made
        from what the job measured of the others."""
        predictions = predict_configs(self.profile, [config], self.memory_budget_bytes)
        if predictions.uncovered_knobs(0) & UNSCALED_KNOBS:
            return None
        key = config.key()
        others = [(other, value) for other, value in measured if other.key() != key]
        scales = measured_scales(covered_ratios(self.profile, others, self.memory_budget_bytes))
        return scales.get(ScaleClass.of(config))

    def accumulation_gain(self, config: Config) -> float:
        """``config``'s predicted samples/s over the same configuration's without gradient
        accumulation (see :attr:`Profile.accumulation`); 1 where either is no figure."""
        alone = config.model_copy(update={"grad_accum_steps": 1})
        rates = predict_configs(
            self.profile, [alone, config], self.memory_budget_bytes
        ).samples_per_s
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = float(rates[1] / rates[0])
        return gain if math.isfinite(gain) and gain > 0 else 1.0

    def _predicted(self, config: Config) -> tuple[float | None, float]:
        """One configuration's predicted samples/s (None where not a finite figure) and the
        prediction's uncertainty."""
        predictions = predict_configs(self.profile, [config], self.memory_budget_bytes)
        value = float(predictions.samples_per_s[0])
        finite = value if value == value and value != float("inf") else None
        return finite, float(predictions.uncertainty[0])

    @cached_property
    def _of_space(self) -> Predictions:
        return predict_space(self.profile, self.space, self.memory_budget_bytes)

    def ceiling(
        self, measured: Sequence[tuple[Config, float]]
    ) -> tuple[float, float, float] | None:
        """The fastest samples/s the profile predicts for a configuration that fits: as it
        read it, on the scale its trials ran at (see :func:`measured_scales`), and on the
        highest scale a trial ran at other than the fastest measured (see
        :func:`highest_other_ratio`); None where nothing fits.

        The profile times each point for a fraction of a second, in one moment of a machine
        whose speed moves by a fifth within minutes: a 2-core EPYC's profiles 2.5 minutes apart
        read text-transformer's step 19% apart (benchmarks/RESULTS.md 1b). Its trials tell the
        scale; each is noisy too, so the search takes all three (see
        :func:`autotune.search.at_ceiling`).
        """
        predictions = self._of_space
        covered = covered_ratios(self.profile, measured, self.memory_budget_bytes)
        scales = measured_scales(covered)
        columns = predictions.columns
        scale = np.ones(len(predictions))
        for kind, value in scales.items():
            scale[
                (columns.retain_freed_memory == kind.retain_freed_memory)
                & ((columns.num_workers == 0) == kind.loads_in_main)
            ] = value
        rate = predictions.samples_per_s
        fits = ~predictions.over_memory & np.isfinite(rate)
        if not fits.any():
            return None
        read = float(rate[fits].max())
        highest = highest_other_ratio(covered)
        scaled = float((rate * scale)[fits].max())
        return read, scaled, read if highest is None else read * highest


#: Knobs the profile's eager step knows nothing of: a trial's gain through one (a compiled
#: step, TF32, cuDNN's autotuner, pinned or device-prefetched copies) is no error of the
#: profile's scale. Loader-side knobs it does not time (persistent workers, other prefetch
#: factors) stay in: they move a configuration's throughput by its epoch's start, where these
#: can double the step on a GPU.
UNSCALED_KNOBS = frozenset({"compile", "tf32", "cudnn_benchmark", "pin_memory", "device_prefetch"})


class ScaleClass(NamedTuple):
    """What the job's trials are scaled by apart (see :func:`measured_scales`)."""

    retain_freed_memory: bool
    #: No workers: the main process loads each batch, then steps on it.
    loads_in_main: bool

    @classmethod
    def of(cls, config: Config) -> ScaleClass:
        return cls(config.retain_freed_memory, config.num_workers == 0)


@dataclass(frozen=True)
class CoveredRatio:
    """A measured configuration the profile covers, and its measured / predicted samples/s."""

    kind: ScaleClass
    samples_per_s: float
    ratio: float


def covered_ratios(
    profile: Profile,
    measured: Sequence[tuple[Config, float]],
    memory_budget_bytes: int | None = None,
) -> list[CoveredRatio]:
    """The measured / predicted samples/s of the measured configurations that ran and set
    none of :data:`UNSCALED_KNOBS` otherwise than the profile ran them."""
    runs = [(config, value) for config, value in measured if value > 0]
    if not runs:
        return []
    predictions = predict_configs(profile, [config for config, _ in runs], memory_budget_bytes)
    covered = []
    for index, (config, value) in enumerate(runs):
        predicted = float(predictions.samples_per_s[index])
        unscaled = predictions.uncovered_knobs(index) & UNSCALED_KNOBS
        if not unscaled and 0 < predicted < float("inf"):
            covered.append(CoveredRatio(ScaleClass.of(config), value, value / predicted))
    return covered


def measured_scales(covered: Sequence[CoveredRatio]) -> dict[ScaleClass, float]:
    """The median measured / predicted samples/s of the covered trials (see
    :func:`covered_ratios`) per :class:`ScaleClass`; a class without such a trial takes the
    median of those with its handling of freed memory, else of all. Empty before any.

    Each class errs its own way. glibc's defaults are timed in a fresh heap once, and how often
    glibc hands the heap back differs between processes. The loader and the step are timed
    apart and joined two ways: one after the other in the main process, side by side with
    workers (on a CPU, sharing its cores). On a 2-core Xeon with AMX three image-cnn jobs of
    the suite (2026-12-06) ran their trials with workers at a median 0.85 of the profile's
    predictions (0.71-0.97) and those without at 1.09 (0.86-1.23), and one read its finalist
    without workers at 1.26 of the job's prediction. Replayed over three suite runs' 45
    confirmed finalists, scaled apart 40 came within 0.85-1.15 of the job's prediction,
    scaled together 36; in each image-cnn run the search trials' 90th percentile fell, from
    1.22-1.31 to 1.15-1.16 (benchmarks/RESULTS.md 1b).
    """
    by_class: dict[ScaleClass, list[float]] = defaultdict(list)
    by_heap: dict[bool, list[float]] = defaultdict(list)
    for trial in covered:
        by_class[trial.kind].append(trial.ratio)
        by_heap[trial.kind.retain_freed_memory].append(trial.ratio)
    pooled = [trial.ratio for trial in covered]
    if not pooled:
        return {}
    classes = [ScaleClass(*kind) for kind in itertools.product((True, False), repeat=2)]
    return {
        kind: statistics.median(by_class[kind] or by_heap[kind.retain_freed_memory] or pooled)
        for kind in classes
    }


def highest_other_ratio(covered: Sequence[CoveredRatio]) -> float | None:
    """The highest measured / predicted of the covered trials (see :func:`covered_ratios`)
    other than the fastest measured of them; None with fewer than two.

    The best measured is the fastest of noisy trials: above their median scale by about their
    spread. It broke through the profile's ceiling only where it stands out from the other
    trials as well: on a 2-core Xeon a default image-cnn job's eleventh trial read 1.085 of its
    prediction, 8% over the ceiling as read, where its trials' median read 0.99 and the highest
    of the others 1.04; taken for a breakthrough, the search ran its whole budget of 20, its
    eight measured trials after it reading 0.96-1.10 of theirs (benchmarks/RESULTS.md 1b).
    """
    by_speed = sorted(covered, key=lambda trial: trial.samples_per_s)
    return max((trial.ratio for trial in by_speed[:-1]), default=None)


#: The knobs the profile measures. Configurations that differ only in others (prefetch,
#: persistence, pinning, compile, ...) are predicted alike, so the predicted best are taken one
#: per combination of these: three prefetch variants of one configuration would spend the
#: seeds on one point of what the profile knows.
PROFILED_KNOBS = ("batch_size", "num_workers", "amp", "channels_last")


def seed_configs(
    predictions: Predictions,
    space: SearchSpace,
    n_trials: int,
    already: Iterable[Config],
    keeping_batch: int | None = None,
) -> list[Config]:
    """The predicted best few (one per combination of :data:`PROFILED_KNOBS`), the predicted
    best that keeps the effective batch ``keeping_batch`` (a batch size dividing it, for the
    drop-in answer), the best of each precision read close to the best that none of these
    runs in (see :func:`_close_precisions`; each in place of an uncertain seed), then the most
    uncertain few (no two turning the same knob away from what the profile ran), none
    predicted over memory and none already queued."""
    room = max(0, n_trials - 2)
    best_count = min(PREDICTED_BEST, max(1, room // 3))
    uncertain_count = min(MOST_UNCERTAIN, room // 5)
    already = list(already)
    seen = {config.key() for config in already}
    # Points of the profile already queued (the baseline's, the checklist's) count as covered.
    profiled = {tuple(getattr(config, name) for name in PROFILED_KNOBS) for config in already}
    chosen: list[Config] = []
    # The uncovered knobs the uncertain seeds taken so far explore.
    explored: set[str] = set()

    def take(
        indices: Iterable[int],
        count: int,
        distinct_profiled: bool = False,
        distinct_uncovered: bool = False,
    ) -> int:
        """Queue up to ``count`` of ``indices``; returns how many it queued."""
        taken = 0
        for index in indices:
            if taken >= count:
                break
            uncovered = predictions.uncovered_knobs(index) if distinct_uncovered else set()
            if uncovered & explored:
                continue
            values = predictions.values(index)
            point = tuple(values[name] for name in PROFILED_KNOBS)
            if distinct_profiled and point in profiled:
                continue
            config = space.config_from(values)
            if config.key() in seen:
                continue
            seen.add(config.key())
            profiled.add(point)
            explored.update(uncovered)
            chosen.append(config)
            taken += 1
        return taken

    # Enough of the ranking to find the best few distinct points past the variants of each.
    ranked = predictions.best(len(predictions))
    take(ranked, best_count, distinct_profiled=True)
    for twin in _contention_twins(predictions, space):
        if len(chosen) < room and twin.key() not in seen:
            seen.add(twin.key())
            chosen.append(twin)
    if (
        keeping_batch is not None
        and len(chosen) < room
        and not any(keeping_batch % config.batch_size == 0 for config in chosen)
    ):
        # The drop-in answer is the fastest measured configuration that keeps the user's
        # effective batch: without this seed only the search's detours reach one (a default
        # text-transformer job's was batch 16 with six workers at 1.05x the baseline, where
        # the profile predicts its batch 32 with freed memory retained near the best).
        keeps = keeping_batch % predictions.columns.batch_size == 0
        take((index for index in ranked if keeps[index]), 1)
    # A precision read close to the best that no seed runs in is a prediction as uncertain as
    # any: it takes the place of an uncertain seed, so the seeds cost no more trials.
    for index in _close_precisions(predictions, ranked, chosen):
        if len(chosen) < room:
            uncertain_count = max(0, uncertain_count - take([index], 1))
    among = max(1, int(len(predictions) * UNCERTAIN_AMONG_SHARE))
    # Each explores knobs the profile did not run that no other does: a second compiled seed
    # cost a CPU job 35 s to learn what the first had shown (compile is the least known knob,
    # so the most uncertain are otherwise all compiled variants).
    take(predictions.most_uncertain(among, among=among), uncertain_count, distinct_uncovered=True)
    return chosen


#: A precision whose predicted best reaches this share of the best predicted anywhere is
#: measured once, its best, where the predicted best seeds hold none of it: within the
#: spread of the profile's reading of one precision against another.
CLOSE_PRECISION_SHARE = 0.9


def _close_precisions(
    predictions: Predictions, ranked: Sequence[int], seeded: Sequence[Config]
) -> list[int]:
    """The predicted best of each precision (``amp``) that none of ``seeded`` runs in, where
    it reaches :data:`CLOSE_PRECISION_SHARE` of the best predicted; ``ranked`` is
    :meth:`Predictions.best` of every configuration (those that fit, fastest first).

    The profile times each precision's sweep in its own seconds of a machine whose speed
    moves: a text-transformer job on a 2-core EPYC read bf16 at 436-537 samples/s where two
    jobs right after it read 490-659, so its predicted best seeds were all fp32, its search
    ended at the ceiling fp32 set, and it recommended batch 32 in fp32, re-measured at 0.79x
    the batch 128 in bf16 the other two picked (benchmarks/RESULTS.md section 1, 2026-12-05).
    A precision read that close is measured once, in place of one of the most uncertain seeds
    (see :func:`seed_configs`).
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

    The profile times the step's threads with the cores to itself. Beside busy workers a step
    on every core and the workers wait on each other, which no part timed alone shows: on a
    2-core CPU, slow-storage's pick (48 workers) trained 1.09x faster on one thread, while
    steps that bound their configuration lost 21-40% (benchmarks/RESULTS.md 1b). Whether
    loading in the main process, one batch after the other with the step, beats workers
    sharing the step's cores is what it knows least as well, both ways: on a 2-core Xeon it
    predicted image-cnn's batch 256 at 2,020 samples/s with one worker (measured 1,970) and
    1,958 without (re-measured 2,349), and a search whose every seed had workers recommended
    the baseline; on a 2-core EPYC a default job whose predicted best loaded in the main
    process measured no configuration with workers at its batch (benchmarks/RESULTS.md 1b,
    the twin with workers). Only a trial tells, so each twin is measured, unless the profile
    rules it out by far (under :data:`SLOW_SHARE` of the best, the bar a proposal of the
    sampler must clear): slow-storage's without workers, loading one file after the other, was
    predicted 7x below its best with workers and cost a job 8 s of its 97.

    Workers can take from a step no more than its loading in the main process: where the
    best without them comes within the search's ceiling (:data:`CEILING_SHARE`) of what its
    step reaches alone, receiving its batches from workers, the twin with workers cannot
    beat it beyond a trial's spread and is not measured. text-transformer loads a batch in 2%
    of its step: on a 2-core Xeon its twins with two workers were predicted at 0.86-0.92 of
    the best, measured at 0.68-0.90 of it, and cost section 1's jobs 4.2-5.8 s of their
    55-61 s each; image-cnn's main-process loading holds its best at 0.80-0.83 of that
    step, so its twin is measured.
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


#: A proposal of the sampler predicted under this share of the best measured so far is skipped
#: unmeasured. A third: the widest miss of a prediction seen on the built-ins (measured 2.3x
#: predicted, a batch extrapolated past the step sweep) would still leave it short, while
#: proposals the profile rules out by far (bf16 where a CPU emulates it: 19 samples/s beside
#: 326) cost a text-transformer job 255 s of its 8 minutes, one of them a 180 s timeout.
SLOW_SHARE = 1 / 3


def predicted_too_slow(
    predictor: Predictor,
    config: Config,
    best: float,
    compile_s: float | None = None,
    run_samples: int | None = None,
    best_config: Config | None = None,
) -> str | None:
    """Why ``config`` is not worth measuring beside the best measured so far (samples/s over
    a run of ``run_samples``, of ``best_config`` where given), or None.

    The profile does not predict compile time: a compiled configuration is charged
    ``compile_s`` (the shortest compile of its mode measured so far, a lower bound for this
    one), and without it the prediction is an upper bound of its throughput over the run.
    Where the profile predicted the best configuration below what it measured, the bar is that
    prediction: a profile that reads the whole workload slow (a tiny workload's step in a busy
    second, say) must not rule out every configuration beside a measured best.
    """
    predicted = predictor.samples_per_s(config)
    if predicted is None:
        return None
    charged = compile_s if config.compile != "off" else None
    over_run = throughput_over_run(predicted, charged, run_samples)
    best_predicted = None if best_config is None else predictor.samples_per_s(best_config)
    bar = min(best, best_predicted or best)
    if over_run >= SLOW_SHARE * bar:
        return None
    compiling = (
        f" over the run, {charged:.1f} s of compiling included" if over_run < predicted else ""
    )
    return (
        f"the profile predicts {over_run:,.1f} samples/s{compiling}, under a third of the "
        f"best measured so far ({best:,.1f})"
    )


#: How far above its prediction a configuration may measure, in its prediction's uncertainties
#: (``Predictions.uncertainty``: 0.1 for one timed from measured points alone). Two: image-cnn's
#: twin without workers, timed points alone, re-measured at 1.20x its prediction (2,349 against
#: 1,958 samples/s on a Xeon); the widest miss, 2.3x, was a batch extrapolated past the step
#: sweep, whose uncertainty is 0.4 and more.
REACH_UNCERTAINTIES = 2


def below_reach(
    predictor: Predictor, config: Config, best: float, best_config: Config
) -> str | None:
    """Why the profile rules ``config``, a neighbour of the best measured so far (``best``
    samples/s, of ``best_config``), out as a step up from it, or None.

    A neighbour is measured to find a slope (see :func:`autotune.search.run_search`), so it
    must be able to beat the best: it is ruled out where even its prediction raised by twice
    its uncertainty stays under the best, as measured or as predicted (the lower: a profile
    that reads the whole workload slow scales the neighbour down alike). On a 2-CPU machine
    each of slow-storage's jobs measured batch 256 with 4 workers next to its best with 8,
    predicted at half of it (874 against 1,710 samples/s; measured 911 against 1,695): 9-10 s
    of a 90 s job.
    """
    reach = predictor.reach(config)
    if reach is None:
        return None
    bar = min(best, predictor.samples_per_s(best_config) or best)
    if reach >= bar:
        return None
    return (
        f"the profile allows it at most {reach:,.1f} samples/s, under the best it is next "
        f"to ({best:,.1f} measured)"
    )


#: torch.compile's modes by the work they do: max-autotune compiles what default compiles and
#: then benchmarks kernel choices (a text-transformer trial on an H200: default 20.8 s,
#: max-autotune still compiling after 230 s), so a default compile bounds it from below.
COMPILE_MODES_BY_COST = ("default", "max-autotune")


def compile_lower_bound(shortest_compile_s: Mapping[str, float], mode: str) -> float | None:
    """Seconds a compile of ``mode`` takes at least: the longest of the shortest compiles
    measured so far of ``mode`` and of the modes that do less work; None when none was."""
    if mode not in COMPILE_MODES_BY_COST:
        return None
    cheaper_or_same = COMPILE_MODES_BY_COST[: COMPILE_MODES_BY_COST.index(mode) + 1]
    bounds = [shortest_compile_s[m] for m in cheaper_or_same if m in shortest_compile_s]
    return max(bounds) if bounds else None


#: Predicts one configuration's samples/s, or None without a profile.
PredictFn = Callable[[Config], float | None]


def no_prediction(config: Config) -> float | None:
    return None


def predicted_ranking(
    workload: str,
    device: str = "cpu",
    seconds: float = 40.0,
    memory_budget_bytes: int | None = None,
    timeout_s: float = 300.0,
) -> tuple[Profile, list[tuple[Config, float]]]:
    """Probe and profile ``workload`` in fresh processes, then rank every configuration of its
    default space by predicted samples/s (fastest first, those over the budget left out).

    For benchmarks: how good the profile's ranking is, without running a search.
    """
    probe = probe_workload(workload, device, timeout_s)
    space = SearchSpace(probe.device, probe.workload)
    host_budget = not probe.device.is_cuda
    plan = profile_plan(space, memory_budget_bytes, host_budget, seconds)
    profile = profile_workload(
        workload,
        device,
        plan,
        timeout_s + seconds,
        memory_budget_bytes=memory_budget_bytes,
        budget_is_host_memory=host_budget,
    )
    if profile.extra_workers:
        space = SearchSpace(probe.device, probe.workload, extra_workers=profile.extra_workers)
    return profile, ranking(predict_space(profile, space, memory_budget_bytes), space)
