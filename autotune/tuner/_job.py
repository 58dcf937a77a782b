"""Running a tuning job: probe the workload, profile it, search, confirm and recommend, in
that order, each step resumable from what an earlier attempt stored. :class:`_JobRun` holds the
run's state and measures each trial; the steps' rules live beside it (the profile's judgements,
seeding, the time budget, the stored rows, the confirmation)."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import optuna
from sqlalchemy.exc import SQLAlchemyError

from autotune.errors import AutotuneError, ConfigError, NoFeasibleConfigError
from autotune.measure import device_identity, fingerprint_differences
from autotune.predict import Profile
from autotune.recommend import (
    build_document,
)
from autotune.runner import (
    ProbeResult,
    RankPlan,
    TrialCancelled,
    TrialLauncher,
    probe_workload,
    rank_devices,
    run_trial,
)
from autotune.search import (
    Observation,
    SearchState,
    clearly_slow,
    compile_allowance,
    completed_values,
    enqueue_candidates,
    enqueue_first_trials,
    hopeless_in_warmup,
    off_grid_baseline,
    open_study,
    run_search,
    study_name_for,
)
from autotune.space import Config, SearchSpace
from autotune.store import (
    Database,
    Job,
    Trial,
    TrialRecord,
    device_locks,
    lock_owned_job,
    release_interrupted,
    utcnow,
)
from autotune.tuner._budget import TimeBudget
from autotune.tuner._hardware import check_device_class, measurement_set_for
from autotune.tuner._judges import JobJudges
from autotune.tuner._options import TuneOptions, format_mib
from autotune.tuner._predictor import Predictor
from autotune.tuner._profiling import (
    ProfileCancelled,
    measure_profile,
    profile_plan,
    stored_profile,
)
from autotune.tuner._recommending import (
    NOTHING_STAYED_USABLE,
    confirm_against_baseline,
    confirmation_candidates,
    memory_limited,
    nothing_usable_message,
    run_length,
)
from autotune.tuner._remembered import answer_key
from autotune.tuner._reporter import Reporter
from autotune.tuner._seeding import PREDICTED_PHASE, SeedBounds, seed_configs
from autotune.tuner._stored import JobTrials, load_job, update_job


class JobCancelled(Exception):
    """The job was cancelled while it ran."""


class _JobRun:
    """The state of one job while this process runs it."""

    def __init__(
        self,
        db: Database,
        job_id: int,
        options: TuneOptions,
        reporter: Reporter,
        cancel: threading.Event,
        owner: str | None = None,
    ) -> None:
        self.db = db
        self.owner = owner
        self.identity = device_identity(options.device)
        #: The devices a trial holds: one GPU per rank, the CPU once (its ranks share it).
        self.devices = [
            device_identity(device).key
            for device in rank_devices(options.device, options.nproc_per_node)
        ]
        self.job_id = job_id
        self.options = options
        self.reporter = reporter
        self.cancel = cancel
        #: Short windows screen configurations in the search; longer ones decide in confirmation.
        self.plan = options.measure_plan()
        self.confirm_plan = options.confirm_plan()
        self.time = TimeBudget(
            options.time_budget_s, self.plan, self.confirm_plan, options.confirm_rounds
        )
        self.trials = JobTrials(db, job_id, owner)
        self.probe: ProbeResult | None = None
        self.budget: int | None = None
        #: Samples in the user's run, which compile time is charged against.
        self.run_samples: int | None = None
        #: The profile's judgements; None without a profile.
        self.judges: JobJudges | None = None
        #: Trials measured so far outside the confirmation, by this process.
        self.searched = 0

    # -- set-up -------------------------------------------------------------------------------

    def _probe(self) -> tuple[ProbeResult, SearchSpace]:
        options = self.options
        with device_locks(self.db, self.devices, self.cancel) as held:
            if not held:
                raise JobCancelled
            probe = probe_workload(options.workload, options.device, options.trial_timeout_s)
        # The probe saw one rank's share of the cores; the space divides the host's bounds.
        probe = dataclasses.replace(
            probe, device=probe.device.model_copy(update={"host_share": options.ranks_sharing_host})
        )
        device = probe.device
        self.budget = options.memory_budget_bytes(device.memory_bytes)
        if self.budget is not None:
            idle = probe.workload.idle_host_memory_bytes
            if not device.is_cuda and self.budget < idle:
                raise ConfigError(
                    f"--max-memory {format_mib(self.budget)} is below the {format_mib(idle)} "
                    "the workload needs before its first batch; raise --max-memory above that"
                )
        self.probe = probe
        space = self._space()
        self.run_samples = options.run_samples(probe.workload.dataset_length, space.baseline())
        if self.run_samples is None and set(space.choices["compile"]) != {"off"}:
            raise ConfigError(
                "the dataset has no length, so the run's length is unknown and torch.compile's "
                "time cannot be charged against it; pass --steps N (or --fix compile=off)"
            )
        return probe, space

    def _space(self, extra_workers: tuple[int, ...] = ()) -> SearchSpace:
        assert self.probe is not None
        options = self.options
        return SearchSpace(
            self.probe.device,
            self.probe.workload,
            options.fixed,
            options.ranges,
            options.effective_batch,
            options.baseline,
            extra_workers=extra_workers,
        )

    def _profile(self, space: SearchSpace) -> SearchSpace:
        """Profile once (a resumed job reuses the stored profile) and predict; returns the
        space with the worker counts the profile found worth trying beyond the grid."""
        if not self.options.profile:
            return space
        job = load_job(self.db, self.job_id)
        profile = stored_profile(job)
        assert self.probe is not None
        if job.fingerprint and fingerprint_differences(job.fingerprint, self.probe.fingerprint):
            profile = None  # measured on other hardware: the new measurement set profiles anew
        if isinstance(profile, Profile) and profile.ranks != self.options.nproc_per_node:
            profile = None  # measured as other ranks (or before profiles ran as the ranks)
        if profile is None:
            host_budget = not self.probe.device.is_cuda
            plan = profile_plan(
                space,
                self.budget,
                host_budget,
                self.options.profile_seconds,
                self._compile_allowance(),
                self.run_samples,
            )
            try:
                profile = measure_profile(
                    self.db,
                    self.job_id,
                    self.owner,
                    self.devices,
                    self.options.workload,
                    self.options.device,
                    plan,
                    self.options.trial_timeout_s,
                    self.budget,
                    host_budget,
                    self.cancel,
                )
            except ProfileCancelled:
                raise JobCancelled from None
        if isinstance(profile, str):
            self.reporter.profile_failed(profile)
            return space
        space = self._space(tuple(profile.extra_workers)) if profile.extra_workers else space
        # The profile's compiles were the job's time as a trial's are.
        self.time.spent(None, sum(point.compile_s for point in profile.compile))
        self.judges = JobJudges(
            Predictor(profile, space, self.budget),
            self.trials,
            self.run_samples,
            self._compile_allowance,
            trial_allowance=(self.plan, self._trial_allowance),
        )
        self.reporter.profiled(profile)
        return space

    # -- measuring ----------------------------------------------------------------------------

    def _measure(
        self, config: Config, phase: str, trial: optuna.Trial | None = None
    ) -> TrialRecord | None:
        """Run one trial process and store its record; None when the job was cancelled."""
        self.reporter.trial_started(phase, config)
        # The pruning rule runs against values read now, before the trial starts: nothing
        # reads or writes the database while a window is being timed.
        pruning = trial is not None and self.options.prune
        finished = completed_values(trial.study) if pruning and trial is not None else []
        intermediate: list[float] = []
        scale = None if self.judges is None else self.judges.scale(config)

        def on_progress(event: dict[str, Any]) -> bool:
            if not pruning:
                return False
            if event.get("warmup"):
                return hopeless_in_warmup(event, finished)
            intermediate.append(event["samples_per_s"])
            return clearly_slow(intermediate, finished)

        device = self.probe.device if self.probe else None
        allowance = self._trial_compile_allowance(config, phase, finished if pruning else None)
        timeout = self.options.trial_timeout_for(config)
        if allowance is not None:
            # The trial's compile is stopped at its allowance; the timeout only backs that up.
            timeout = min(timeout, self.options.trial_timeout_s + allowance)
        # Held for the whole trial process: another trial on this device would share it.
        with device_locks(self.db, self.devices, self.cancel) as held:
            if not held:
                return None
            try:
                record = run_trial(
                    self.options.workload,
                    config,
                    self.options.device,
                    self.confirm_plan if phase == "confirm" else self.plan,
                    timeout,
                    memory_budget_bytes=self.budget,
                    budget_is_host_memory=not (device and device.is_cuda),
                    device_uuid=self.probe.device_uuid if self.probe else None,
                    on_progress=on_progress,
                    cancel=self.cancel,
                    compile_allowance_s=allowance,
                )
            except TrialCancelled:
                return None
        predicted = None if self.judges is None else self.judges.predictor.samples_per_s(config)
        record = record.model_copy(
            update={"predicted_samples_per_s": predicted, "prediction_scale": scale}
        )
        if trial is not None:
            for step, value in enumerate(intermediate):
                trial.report(value, step=step)
        if record.duration_s is not None:
            self.time.spent(record.duration_s, record.compile_s)
        self.searched += phase != "confirm"
        if config.compile != "off" and record.compile_s is not None and self.judges is not None:
            self.judges.compiled(config.compile, record.compile_s)
        row = self.trials.store(record, phase, trial.number if trial is not None else None)
        self.reporter.trial_finished(row)
        return record

    def _compile_allowance(self) -> float:
        """Seconds one compile may take now: a share of the job's remaining time (see
        :meth:`TimeBudget.compile_allowance_s`)."""
        return self.time.compile_allowance_s(
            max(0, self.options.n_trials - self.searched), self.options.confirm_top + 1
        )

    def _trial_allowance(self) -> float:
        """Seconds one trial may be predicted to take now: a share of the job's remaining
        time (see :meth:`TimeBudget.trial_allowance_s`)."""
        return self.time.trial_allowance_s(
            max(0, self.options.n_trials - self.searched), self.options.confirm_top + 1
        )

    def _trial_compile_allowance(
        self, config: Config, phase: str, finished: list[float] | None
    ) -> float | None:
        """Seconds a trial of ``config`` may compile for before it is stopped: in the search,
        a share of the job's remaining time, and with ``finished`` values to beat, at most
        what the run can repay (see :func:`compile_allowance`); None where it does not
        compile, in the confirmation (its candidates compiled within the search's), and
        with ``--no-prune`` (no trial is stopped early)."""
        if config.compile == "off" or phase == "confirm" or not self.options.prune:
            return None
        repaid = None if finished is None else compile_allowance(self.run_samples, finished)
        share = self._compile_allowance()
        return share if repaid is None else min(share, repaid)

    def _search_observation(
        self, config: Config, phase: str, trial: optuna.Trial | None
    ) -> Observation:
        record = self._measure(config, phase, trial)
        if record is None:
            return Observation(0.0, cancelled=True)
        # The throughput over the user's run: compile time is paid once per run.
        over_run = record.samples_per_s_over(self.run_samples) if record.usable else None
        value = over_run or 0.0
        return Observation(
            value,
            pruned=record.pruned,
            out_of_memory=record.ran_out_of_memory,
            unsuited=record.error if record.outcome == "unsuited" else None,
        )

    def _out_of_time(self) -> bool:
        return self.cancel.is_set() or self.time.search_over()

    # -- the job ------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        probe, space = self._probe()
        with self.db.session(immediate=True) as session:
            # Settled before profiling: a refused job stores nothing new, its profile included.
            job = lock_owned_job(session, self.job_id, self.owner)
            check_device_class(job, self.options.device_class, self.identity.device_class)
            self.trials.measurement_set = measurement_set_for(
                session, job, probe.fingerprint, self.options.on_new_hardware, self.reporter
            )
        space = self._profile(space)
        with self.db.session(immediate=True) as session:
            job = lock_owned_job(session, self.job_id, self.owner)
            job.measurement_set = self.trials.measurement_set
            job.device_class = self.identity.device_class
            job.workload_name = probe.workload.name
            job.device = probe.device.model_dump()
            job.fingerprint = probe.fingerprint
            job.space = space.describe()
            job.study_name = study_name_for(self.job_id, self.trials.measurement_set)
            session.flush()
            session.expunge(job)
        self.reporter.job_started(job, probe, space)

        study = open_study(
            self.db.url,
            self.job_id,
            space,
            self.options.n_trials,
            self.options.seed,
            self.trials.measurement_set,
        )
        fresh = not study.get_trials(deepcopy=False)
        state, confirm_rows = self.trials.resume(study, space, self.run_samples)
        enqueue_first_trials(study, space)
        if fresh and self.judges is not None:
            predictor = self.judges.predictor
            # Where the search may change the effective batch, the drop-in answer keeps it.
            keeping_batch = (
                None
                if self.options.effective_batch is not None
                else space.baseline().effective_batch
            )
            seeds = seed_configs(
                predictor.all(),
                space,
                self.options.n_trials,
                [space.baseline(), space.checklist()],
                keeping_batch,
                SeedBounds(
                    self.run_samples,
                    self._compile_allowance(),
                    self.plan,
                    self._trial_allowance(),
                    predictor.eager().samples_per_s,
                ),
            )
            enqueue_candidates(study, space, seeds, PREDICTED_PHASE, state)
        self.reporter.phase_started("search", self.options.n_trials)
        baseline = off_grid_baseline(space, state)
        if baseline is not None:
            observation = self._search_observation(baseline, "baseline", None)
            if observation.cancelled:
                raise JobCancelled
            state.remember(baseline, observation)
        run_search(
            study,
            space,
            state,
            self._search_observation,
            self.options.n_trials,
            on_skip=self.reporter.trial_skipped,
            should_stop=self._out_of_time,
            seed=self.options.seed,
            patience=self.options.patience,
            predicted_slow=None if self.judges is None else self.judges.predicted_slow,
            out_of_reach=None if self.judges is None else self.judges.below_reach,
            ceiling=None if self.judges is None else self.judges.ceiling,
        )
        if self.cancel.is_set():
            raise JobCancelled
        return self._recommend(space, state, confirm_rows)

    def _recommend(
        self, space: SearchSpace, state: SearchState, confirm_rows: list[Trial]
    ) -> dict[str, Any]:
        searched = self.trials.searched_records()
        baseline = space.baseline()
        candidates = confirmation_candidates(
            self.options,
            searched,
            baseline,
            self.time.confirm_room(),
            self.run_samples,
            None if self.judges is None else self.judges.predictor.accumulation_gain,
        )
        if not candidates and not any(m.usable for m in searched):
            raise NoFeasibleConfigError(nothing_usable_message(searched, self.budget))
        confirmation = confirm_against_baseline(
            baseline,
            candidates,
            confirm_rows,
            self.options.confirm_rounds,
            lambda config: self._measure(config, "confirm"),
            self.run_samples,
            self.reporter,
        )
        if confirmation is None:
            raise JobCancelled
        if not confirmation.winner.usable:
            raise NoFeasibleConfigError(NOTHING_STAYED_USABLE)
        assert self.probe is not None
        return build_document(
            workload_name=self.probe.workload.name,
            device=self.probe.device,
            confirmation=confirmation,
            search_runs=searched,
            trial_counts=self.trials.counts(state, self.options.n_trials),
            memory_limited=memory_limited(confirmation.winner.config, searched),
            memory_budget_bytes=self.budget,
            fingerprint=self.probe.fingerprint,
            space=space.describe(),
            job_id=self.job_id,
            run=run_length(self.options, self.run_samples),
            profile=None if self.judges is None else self.judges.predictor.profile,
            optimizer=self.probe.workload.optimizer,
            effective_batch_forced=self.options.effective_batch is not None,
            distributed={
                "nproc_per_node": self.options.nproc_per_node,
                "backend": "nccl" if self.probe.device.is_cuda else "gloo",
                "host_share": self.options.ranks_sharing_host,
            },
        )


def run_job(
    db: Database,
    job_id: int,
    reporter: Reporter | None = None,
    cancel: threading.Event | None = None,
    owner: str | None = None,
) -> Job:
    """Run (or resume) job ``job_id`` in this process until it has a recommendation.

    Raises the :class:`AutotuneError` that failed the job after storing it on the job. A
    worker passes its id as ``owner``: the job's state is then only written while it still
    holds the job.
    """
    reporter = reporter or Reporter()
    cancel = cancel or threading.Event()
    job = load_job(db, job_id)
    options = TuneOptions.model_validate(job.options)
    update_job(
        db,
        job_id,
        owner,
        status="running",
        started_at=job.started_at or utcnow(),
        error=None,
        finished_at=None,
    )
    try:
        # The question as it is now asked: the workload's source when the job starts.
        key = answer_key(options)
        ranks = RankPlan(options.nproc_per_node, options.ranks_sharing_host)
        with TrialLauncher(options.workload, options.device, ranks):  # the probe's and trials'
            document = _JobRun(db, job_id, options, reporter, cancel, owner).run()
    except JobCancelled:
        update_job(db, job_id, owner, status="cancelled", finished_at=utcnow())
    except AutotuneError as exc:
        update_job(db, job_id, owner, status="failed", error=str(exc), finished_at=utcnow())
        reporter.job_finished(load_job(db, job_id))
        raise
    except KeyboardInterrupt as exc:
        release_interrupted(exc)  # Ctrl-C may have landed inside one of Optuna's statements
        update_job(
            db,
            job_id,
            owner,
            status="interrupted",
            error="interrupted; resume with `autotune run ... --resume`",
        )
        raise
    except (SQLAlchemyError, optuna.exceptions.StorageInternalError):
        # The database went away (a restart, the network): not the job's fault. A worker puts
        # the job back in the queue once it reconnects; nothing here can be stored reliably.
        raise
    except Exception as exc:
        update_job(
            db,
            job_id,
            owner,
            status="failed",
            error=f"internal error: {exc!r}",
            finished_at=utcnow(),
        )
        raise
    else:
        update_job(
            db,
            job_id,
            owner,
            status="succeeded",
            recommendation=document,
            answer_key=key,
            finished_at=utcnow(),
        )
    job = load_job(db, job_id)
    reporter.job_finished(job)
    return job
