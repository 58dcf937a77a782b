"""Running the tuner exactly as a user would, through its library call, and timing it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.predict import Profile
from autotune.space import Config
from autotune.store import Database, Job
from autotune.tuner import TuneOptions, create_job, run_job
from benchmarks._harness import Comparison, WorkloadContext, describe, log
from benchmarks.predictions import TrialTiming, job_timings

#: The comparison's name for the tuner run as users run it: default options, default space.
DEFAULT_SPACE = "autotune, default space"


@dataclass(frozen=True)
class TunerOutcome:
    config: Config
    n_trials: int
    wall_s: float
    #: The recommendation document's trial counts (total, confirm, pruned, ...).
    counts: dict[str, Any]
    timings: list[TrialTiming]
    verdict: str
    #: The profile the job measured (None with ``--no-profile`` or when profiling failed).
    profile: Profile | None = None
    #: The job's ``--seed``.
    seed: int = 0

    @property
    def measured(self) -> int:
        """Trial processes the job ran: search and confirmation."""
        return len(self.timings)


def tune(
    ctx: WorkloadContext, db: Database, n_trials: int, profile: bool = True, seed: int | None = None
) -> TunerOutcome:
    """One tuning job on the reduced space, with the suite's seed unless ``seed`` is given; wall
    time includes the probe, the profile (unless ``profile`` is False: the plain search) and
    confirmation."""
    options = ctx.options(n_trials, profile, seed)
    log(
        f"{ctx.name}: tuner, {n_trials} search trials{'' if profile else ', no profile'}, "
        f"seed {options.seed}"
    )
    return _run(ctx, db, options)


def default_options(ctx: WorkloadContext) -> TuneOptions:
    """``autotune run`` with its default options on the default space; the suite sets only the
    device, the memory budget and the seed. The smoke run keeps its tiny plan and trial budget
    (``SuiteSettings.default_space_trials``)."""
    reduced = ctx.options(1)
    trials = ctx.settings.default_space_trials
    if trials is None:
        return TuneOptions(
            workload=reduced.workload,
            device=reduced.device,
            max_memory=reduced.max_memory,
            seed=reduced.seed,
        )
    return reduced.model_copy(update={"fixed": {}, "ranges": {}, "n_trials": trials})


def tune_default(ctx: WorkloadContext, db: Database) -> TunerOutcome:
    """The tuner as users run it (``default_options``), on the whole default space."""
    log(
        f"{ctx.name}: tuner with default options on the default space "
        f"({ctx.full_space().size():,} configurations)"
    )
    return _run(ctx, db, default_options(ctx))


def _run(ctx: WorkloadContext, db: Database, options: TuneOptions) -> TunerOutcome:
    job_id = create_job(db, options)
    started = time.monotonic()
    job = run_job(db, job_id)
    wall = time.monotonic() - started
    document = job.recommendation
    assert document is not None, f"tuning job {job_id} ended {job.status}: {job.error}"
    timings = job_timings(db, job_id)
    with db.session() as session:
        stored = session.get_one(Job, job_id).profile
    measured_profile = Profile.model_validate(stored) if stored and "error" not in stored else None
    config = Config.model_validate(document["config"])
    log(f"{ctx.name}: tuner picked {describe(config)} in {wall:.0f} s")
    return TunerOutcome(
        config,
        options.n_trials,
        wall,
        document["trials"],
        timings,
        document["verdict"],
        measured_profile,
        options.seed,
    )


def tuner_method(seed: int) -> str:
    """The comparison session's name for the pick of section 1's tuner job with ``seed``."""
    return f"autotune, seed {seed}"


def median_wall_s(runs: Sequence[TunerOutcome]) -> float:
    """The median wall time of section 1's tuner jobs: its wall target's and random search's."""
    return statistics.median(run.wall_s for run in runs)


def median_run(runs: Sequence[TunerOutcome], comparison: Comparison) -> TunerOutcome:
    """The job whose pick re-measured at the median of the jobs' picks (the lower middle when
    their count is even); a pick whose re-measurement failed counts as the slowest."""
    ranked = sorted(runs, key=lambda run: comparison.median(tuner_method(run.seed)) or 0.0)
    return ranked[(len(ranked) - 1) // 2]
