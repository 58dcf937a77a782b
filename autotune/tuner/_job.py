"""Running a tuning job: probe, search, confirm, recommend; resumable at any point."""

from __future__ import annotations

import statistics
import threading
import time
from collections import defaultdict, deque
from typing import Any

import optuna
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from autotune.errors import AutotuneError, ConfigError, NoFeasibleConfigError
from autotune.measure import device_identity, fingerprint_differences
from autotune.recommend import (
    CandidateRuns,
    Confirmation,
    build_document,
    confirm,
    keeping_effective_batch,
    pick_candidates,
)
from autotune.runner import (
    ProbeResult,
    TrialCancelled,
    TrialLauncher,
    probe_workload,
    run_trial,
)
from autotune.search import (
    InfeasibleSet,
    Observation,
    SearchState,
    clearly_slow,
    compile_allowance,
    completed_values,
    config_from_params,
    enqueue_candidates,
    enqueue_first_trials,
    fail_interrupted_trials,
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
    device_lock,
    lock_owned_job,
    next_trial_number,
    release_interrupted,
    utcnow,
)
from autotune.tuner._options import TuneOptions
from autotune.tuner._profiled import (
    PREDICTED_PHASE,
    PredictFn,
    Predictor,
    ProfileCancelled,
    below_reach,
    compile_lower_bound,
    measure_profile,
    no_prediction,
    predicted_too_slow,
    profile_plan,
    seed_configs,
    stored_profile,
)
from autotune.tuner._record import trial_row
from autotune.tuner._reporter import Reporter


class JobCancelled(Exception):
    """The job was cancelled while it ran."""


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


def create_job(db: Database, options: TuneOptions, status: str = "queued") -> int:
    """Store a new job and return its id.

    A job the caller runs itself (the CLI) is created ``running``, so that no worker sharing
    the database claims it first.
    """
    with db.session(immediate=True) as session:
        job = Job(
            workload=options.workload,
            options=options.model_dump(),
            status=status,
            device_class=options.device_class,
        )
        session.add(job)
        session.flush()
        return job.id


def load_job(db: Database, job_id: int) -> Job:
    with db.session() as session:
        job = session.get(Job, job_id)
        if job is None:
            raise AutotuneError(
                f"job {job_id} does not exist in {db.shown_url}; list jobs to find it"
            )
        session.expunge(job)
        return job


def _update_job(db: Database, job_id: int, owner: str | None = None, **values: Any) -> None:
    """Set fields of a job; with ``owner``, only while that worker still holds it.

    A worker that lost its lease (another took the job over) must not overwrite the new
    owner's state.
    """
    with db.session(immediate=True) as session:
        job = session.get(Job, job_id, with_for_update=True)
        assert job is not None
        if owner is not None and job.worker_id != owner:
            return
        for name, value in values.items():
            setattr(job, name, value)


#: Configurations a time budget always leaves room to confirm: the best found and the baseline.
MIN_CONFIRM_ENTRIES = 2


def confirm_room(seconds_left: float, seconds_per_entry: float) -> int:
    """Candidates beside the baseline whose confirmation ``seconds_left`` covers, each entry
    taking ``seconds_per_entry`` over all its rounds; at least one (the best found)."""
    return max(MIN_CONFIRM_ENTRIES - 1, int(seconds_left // seconds_per_entry) - 1)


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
        self.job_id = job_id
        self.options = options
        self.reporter = reporter
        self.cancel = cancel
        #: Short windows screen configurations in the search; longer ones decide in confirmation.
        self.plan = options.measure_plan()
        self.confirm_plan = options.confirm_plan()
        self.started = time.monotonic()
        self.durations: list[float] = []
        #: The shortest compile measured so far, by compile mode.
        self.shortest_compile_s: dict[str, float] = {}
        self.probe: ProbeResult | None = None
        self.budget: int | None = None
        #: Samples in the user's run, which compile time is charged against.
        self.run_samples: int | None = None
        #: The measurement set this run ranks, resumes and stores into (see ``_measurement_set``).
        self.measurement_set = 1
        self.predictor: Predictor | None = None
        self.predict: PredictFn = no_prediction

    # -- set-up -------------------------------------------------------------------------------

    def _probe(self) -> tuple[ProbeResult, SearchSpace]:
        options = self.options
        with device_lock(self.db, self.identity.key, self.cancel) as held:
            if not held:
                raise JobCancelled
            probe = probe_workload(options.workload, options.device, options.trial_timeout_s)
        device = probe.device
        self.budget = options.memory_budget_bytes(device.memory_bytes)
        if self.budget is not None:
            idle = probe.workload.idle_host_memory_bytes
            if not device.is_cuda and self.budget < idle:
                raise ConfigError(
                    f"--max-memory {_mib(self.budget)} is below the {_mib(idle)} the workload "
                    "needs before its first batch; raise --max-memory above that"
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
        if profile is None:
            host_budget = not self.probe.device.is_cuda
            plan = profile_plan(space, self.budget, host_budget, self.options.profile_seconds)
            try:
                profile = measure_profile(
                    self.db,
                    self.job_id,
                    self.owner,
                    self.identity.key,
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
        self.predictor = Predictor(profile, space, self.budget)
        self.predict = self.predictor.samples_per_s
        self.reporter.profiled(profile)
        return space

    def _resume_state(
        self, study: optuna.Study, space: SearchSpace
    ) -> tuple[SearchState, list[Trial]]:
        """What earlier attempts at this job measured, and re-queue an interrupted trial once."""
        state = SearchState(InfeasibleSet())
        with self.db.session() as session:
            rows = list(
                session.scalars(
                    select(Trial).where(
                        Trial.job_id == self.job_id, Trial.measurement_set == self.measurement_set
                    )
                )
            )
            session.expunge_all()
        searched = [r for r in rows if r.phase != "confirm" and not r.interrupted]
        for row in sorted(searched, key=lambda r: r.number):
            record = TrialRecord.model_validate(row)
            value = record.samples_per_s_over(self.run_samples) if record.usable else None
            state.remember(
                record.config,
                Observation(
                    value or 0.0, pruned=record.pruned, out_of_memory=record.ran_out_of_memory
                ),
            )
        retried = {r.config_key for r in rows if r.interrupted}
        for frozen in fail_interrupted_trials(study):
            config = config_from_params(space, frozen.params)
            phase = str(frozen.user_attrs.get("phase", "search"))
            self._store_interrupted(config, phase, frozen.number)
            if config.key() not in retried and config.key() not in state.values:
                study.enqueue_trial(frozen.params, user_attrs={"phase": phase})
        confirm_rows = [r for r in rows if r.phase == "confirm" and not r.interrupted]
        return state, confirm_rows

    def _store_interrupted(self, config: Config, phase: str, optuna_number: int) -> None:
        noted = utcnow()  # when the interruption was found: the trial's own times are lost
        record = TrialRecord(
            outcome="crashed",
            config=config,
            started_at=noted,
            finished_at=noted,
            error="interrupted: the process running the job stopped during this trial; "
            "it is retried once",
        )
        with self.db.session(immediate=True) as session:
            lock_owned_job(session, self.job_id, self.owner)
            row = trial_row(
                self.job_id,
                next_trial_number(session, self.job_id),
                phase,
                record,
                optuna_number,
                self.measurement_set,
            )
            row.interrupted = True
            session.add(row)

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
        scale = self._prediction_scale(config)

        def on_progress(event: dict[str, Any]) -> bool:
            if not pruning:
                return False
            if event.get("warmup"):
                return hopeless_in_warmup(event, finished)
            intermediate.append(event["samples_per_s"])
            return clearly_slow(intermediate, finished)

        device = self.probe.device if self.probe else None
        # Held for the whole trial process: another trial on this device would share it.
        with device_lock(self.db, self.identity.key, self.cancel) as held:
            if not held:
                return None
            try:
                record = run_trial(
                    self.options.workload,
                    config,
                    self.options.device,
                    self.confirm_plan if phase == "confirm" else self.plan,
                    self.options.trial_timeout_for(config),
                    memory_budget_bytes=self.budget,
                    budget_is_host_memory=not (device and device.is_cuda),
                    device_uuid=self.probe.device_uuid if self.probe else None,
                    on_progress=on_progress,
                    cancel=self.cancel,
                    compile_allowance_s=compile_allowance(self.run_samples, finished)
                    if pruning and config.compile != "off"
                    else None,
                )
            except TrialCancelled:
                return None
        record = record.model_copy(
            update={"predicted_samples_per_s": self.predict(config), "prediction_scale": scale}
        )
        if trial is not None:
            for step, value in enumerate(intermediate):
                trial.report(value, step=step)
        if record.duration_s is not None:
            self.durations.append(record.duration_s)
        if config.compile != "off" and record.compile_s is not None:
            self.shortest_compile_s[config.compile] = min(
                record.compile_s, self.shortest_compile_s.get(config.compile, float("inf"))
            )
        with self.db.session(immediate=True) as session:
            lock_owned_job(session, self.job_id, self.owner)
            row = trial_row(
                self.job_id,
                next_trial_number(session, self.job_id),
                phase,
                record,
                trial.number if trial is not None else None,
                self.measurement_set,
            )
            session.add(row)
            session.flush()
            session.expunge(row)
        self.reporter.trial_finished(row)
        return record

    def _search_observation(
        self, config: Config, phase: str, trial: optuna.Trial | None
    ) -> Observation:
        record = self._measure(config, phase, trial)
        if record is None:
            return Observation(0.0, cancelled=True)
        # The throughput over the user's run: compile time is paid once per run.
        over_run = record.samples_per_s_over(self.run_samples) if record.usable else None
        value = over_run or 0.0
        return Observation(value, pruned=record.pruned, out_of_memory=record.ran_out_of_memory)

    def _predicted_slow(self, config: Config, best_config: Config, best: float) -> str | None:
        """Why the profile rules ``config`` out beside ``best_config`` (measured at ``best``),
        charging a compiled one the least compile time its mode can take, from the compiles
        measured so far in this job."""
        assert self.predictor is not None
        return predicted_too_slow(
            self.predictor,
            config,
            best,
            compile_lower_bound(self.shortest_compile_s, config.compile),
            self.run_samples,
            best_config,
        )

    def _below_reach(self, config: Config, best_config: Config, best: float) -> str | None:
        """Why the profile rules ``config``, a neighbour of ``best_config``, out as a step up."""
        assert self.predictor is not None
        return below_reach(self.predictor, config, best, best_config)

    def _ceiling(self) -> tuple[float, float, float] | None:
        """The profile's ceiling (the fastest it predicts for a configuration that fits), as
        it read it and on the scales this job's trials ran at (see :meth:`Predictor.ceiling`)."""
        assert self.predictor is not None
        return self.predictor.ceiling(
            [
                (record.config, record.samples_per_s or 0.0)
                for record in self._searched_records()
                if record.usable
            ]
        )

    def _confirm_estimate_s(self, entries: int) -> float:
        """Seconds to confirm ``entries`` configurations (the baseline included)."""
        typical = statistics.median(self.durations) if self.durations else 10.0
        # A confirmation run lasts a search trial plus its longer window (at least).
        longer = max(0.0, self.confirm_plan.min_seconds - self.plan.min_seconds)
        return (typical + longer) * entries * self.options.confirm_rounds

    def _confirm_room(self) -> int | None:
        """Candidates the time budget leaves room to confirm beside the baseline (at least
        one); None without a budget."""
        budget = self.options.time_budget_s
        if budget is None:
            return None
        return confirm_room(self.started + budget - time.monotonic(), self._confirm_estimate_s(1))

    def _out_of_time(self) -> bool:
        if self.cancel.is_set():
            return True
        budget = self.options.time_budget_s
        # The baseline (the first measurement) runs whatever the budget: without it there is
        # nothing to recommend against, and a budget shorter than the confirmation's estimate
        # would otherwise end the job before it measured anything.
        if budget is None or not self.durations:
            return False
        # The search goes on while the time left covers confirming the best found beside the
        # baseline; the confirmation then takes as many candidates as the time left covers.
        # (Reserving room for every candidate ended a 170 s job on an H200 after its
        # baseline: 5 entries x 3 rounds of 16 s.)
        return time.monotonic() + self._confirm_estimate_s(MIN_CONFIRM_ENTRIES) >= (
            self.started + budget
        )

    # -- the job ------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        probe, space = self._probe()
        with self.db.session(immediate=True) as session:
            # Settled before profiling: a refused job stores nothing new, its profile included.
            job = lock_owned_job(session, self.job_id, self.owner)
            self._check_device_class(job)
            self.measurement_set = self._measurement_set(session, job, probe.fingerprint)
        space = self._profile(space)
        with self.db.session(immediate=True) as session:
            job = lock_owned_job(session, self.job_id, self.owner)
            job.measurement_set = self.measurement_set
            job.device_class = self.identity.device_class
            job.workload_name = probe.workload.name
            job.device = probe.device.model_dump()
            job.fingerprint = probe.fingerprint
            job.space = space.describe()
            job.study_name = study_name_for(self.job_id, self.measurement_set)
            session.flush()
            session.expunge(job)
        self.reporter.job_started(job, probe, space)

        study = open_study(
            self.db.url,
            self.job_id,
            space,
            self.options.n_trials,
            self.options.seed,
            self.measurement_set,
        )
        fresh = not study.get_trials(deepcopy=False)
        state, confirm_rows = self._resume_state(study, space)
        enqueue_first_trials(study, space)
        predictions = None if self.predictor is None else self.predictor.all()
        if fresh and predictions is not None:
            # Where the search may change the effective batch, the drop-in answer keeps it.
            keeping_batch = (
                None
                if self.options.effective_batch is not None
                else space.baseline().effective_batch
            )
            seeds = seed_configs(
                predictions,
                space,
                self.options.n_trials,
                [space.baseline(), space.checklist()],
                keeping_batch,
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
            predicted_slow=None if self.predictor is None else self._predicted_slow,
            out_of_reach=None if self.predictor is None else self._below_reach,
            ceiling=None if self.predictor is None else self._ceiling,
        )
        if self.cancel.is_set():
            raise JobCancelled
        return self._recommend(space, state, confirm_rows)

    def _check_device_class(self, job: Job) -> None:
        """Refuse to run a job that was submitted for another device class on this device.

        A class the job only recorded when it first ran is no requirement: running elsewhere
        is then a change of hardware like any other (see :meth:`_measurement_set`).
        """
        needed = self.options.device_class
        if needed is not None and needed != self.identity.device_class:
            raise ConfigError(
                f"job {job.id} was submitted for {needed!r} but this device is "
                f"{self.identity.device_class!r}; run it on a matching device or submit a new "
                "job for this one"
            )

    def _measurement_set(self, session: Session, job: Job, current: dict[str, Any]) -> int:
        """The measurement set this run adds to: the job's, or a new one on other hardware.

        Measurements are only ranked within one set. A job resumed or taken over where the
        fingerprint's comparable part differs (see
        :func:`autotune.measure.comparable_identity`) starts a new set when its option
        ``on_new_hardware`` is ``fresh``, keeping the old trials for reading; with ``refuse``
        it fails, and nothing stored changes. A set with no trials yet is simply adopted.
        """
        measurement_set = job.measurement_set or 1
        if job.fingerprint is None:
            return measurement_set
        changes = fingerprint_differences(job.fingerprint, current)
        if not changes:
            return measurement_set
        stored = session.scalar(
            select(func.count())
            .select_from(Trial)
            .where(Trial.job_id == job.id, Trial.measurement_set == measurement_set)
        )
        if not stored:
            return measurement_set
        if self.options.on_new_hardware == "refuse":
            raise ConfigError(
                f"job {job.id} was measured on other hardware or software than this "
                f"({', '.join(changes)}) and its on_new_hardware option is 'refuse'; run it "
                "where these match, or submit it again with on_new_hardware 'fresh' to "
                "measure it anew here"
            )
        self.reporter.measurement_set_started(measurement_set + 1, changes)
        return measurement_set + 1

    def _searched_records(self, confirmed: bool = False) -> list[TrialRecord]:
        """This measurement set's trials that ran to an end; the confirmation's runs too with
        ``confirmed``."""
        phases = () if confirmed else ("confirm",)
        with self.db.session() as session:
            rows = session.scalars(
                select(Trial).where(
                    Trial.job_id == self.job_id,
                    Trial.measurement_set == self.measurement_set,
                    Trial.phase.not_in(phases),
                    Trial.interrupted.is_(False),
                )
            )
            return [TrialRecord.model_validate(row) for row in rows]

    def _prediction_scale(self, config: Config) -> float | None:
        """The scale this job's trials so far ran at against the profile, for ``config``
        (see :meth:`Predictor.scale`): stored beside its prediction, before it runs."""
        if self.predictor is None:
            return None
        return self.predictor.scale(
            config,
            [
                (record.config, record.samples_per_s or 0.0)
                for record in self._searched_records(True)
                if record.usable
            ],
        )

    def _confirm(
        self, baseline: Config, candidates: list[Config], stored: list[Trial]
    ) -> Confirmation:
        """Interleaved re-measurement; runs stored by an interrupted attempt are reused."""
        replay: dict[str, deque[TrialRecord]] = defaultdict(deque)
        for row in sorted(stored, key=lambda r: r.number):
            replay[row.config_key].append(TrialRecord.model_validate(row))

        def measure_once(config: Config) -> TrialRecord | None:
            if replay[config.key()]:
                return replay[config.key()].popleft()
            return self._measure(config, "confirm")

        self.reporter.phase_started("confirm", (len(candidates) + 1) * self.options.confirm_rounds)

        def left(entry: CandidateRuns, runs_saved: int) -> None:
            assert entry.left_after_round is not None and entry.left_because is not None
            self.reporter.candidate_left(
                entry.config, entry.left_after_round, runs_saved, entry.left_because
            )

        confirmation = confirm(
            baseline,
            candidates,
            self.options.confirm_rounds,
            measure_once,
            self.run_samples,
            on_leave=left,
            on_tie_break=self.reporter.tie_break_started,
            on_decided=self.reporter.race_decided,
            on_round_added=self.reporter.round_added,
        )
        if confirmation is None:
            raise JobCancelled
        return confirmation

    def _recommend(
        self, space: SearchSpace, state: SearchState, confirm_rows: list[Trial]
    ) -> dict[str, Any]:
        searched = self._searched_records()
        baseline = space.baseline()
        room = self._confirm_room()
        top = self.options.confirm_top if room is None else min(self.options.confirm_top, room)
        candidates = pick_candidates(searched, baseline, top, self.run_samples)
        # The fastest that keeps the user's effective batch is confirmed too, so the
        # recommendation can give it beside the fastest overall (unless the search held it),
        # where the time budget leaves room for it.
        keeping = (
            None
            if self.options.effective_batch is not None
            else keeping_effective_batch(
                searched,
                baseline,
                self.run_samples,
                None if self.predictor is None else self.predictor.accumulation_gain,
            )
        )
        if (
            keeping is not None
            and keeping.key() not in {c.key() for c in candidates}
            and (room is None or len(candidates) < room)
        ):
            candidates.append(keeping)
        if not candidates and not any(m.usable for m in searched):
            raise NoFeasibleConfigError(self._nothing_usable_message(searched))
        confirmation = self._confirm(baseline, candidates, confirm_rows)
        if not confirmation.winner.usable:
            raise NoFeasibleConfigError(
                "no configuration stayed usable when re-measured (each failed, produced a "
                "non-finite loss or broke the memory budget); see the trials for their errors"
            )
        assert self.probe is not None
        return build_document(
            workload_name=self.probe.workload.name,
            device=self.probe.device,
            confirmation=confirmation,
            search_runs=searched,
            trial_counts=self._trial_counts(state),
            memory_limited=_memory_limited(confirmation.winner.config, searched),
            memory_budget_bytes=self.budget,
            fingerprint=self.probe.fingerprint,
            space=space.describe(),
            job_id=self.job_id,
            run=self._run_length(),
            profile=self.predictor.profile if self.predictor is not None else None,
            optimizer=self.probe.workload.optimizer,
            effective_batch_forced=self.options.effective_batch is not None,
        )

    def _run_length(self) -> dict[str, Any]:
        """The run the recommendation is ranked for, as the document states it."""
        options = self.options
        return {
            "samples": self.run_samples,
            "steps": options.steps,
            "epochs": None if options.steps is not None else options.epochs or 1,
        }

    def _nothing_usable_message(self, searched: list[TrialRecord]) -> str:
        if searched and all(m.outcome == "oom" for m in searched) and self.budget is not None:
            return (
                f"every configuration tried exceeded the memory budget of "
                f"{_mib(self.budget)}; raise --max-memory or narrow --range batch_size"
            )
        outcomes = ", ".join(sorted({m.outcome for m in searched})) or "none measured"
        return (
            f"no configuration could be measured successfully (outcomes: {outcomes}); "
            "see the trials' errors and fix the workload"
        )

    def _trial_counts(self, state: SearchState) -> dict[str, Any]:
        with self.db.session() as session:
            rows = list(
                session.scalars(
                    select(Trial).where(
                        Trial.job_id == self.job_id,
                        Trial.measurement_set == self.measurement_set,
                        Trial.interrupted.is_(False),
                    )
                )
            )
            by_outcome: dict[str, int] = defaultdict(int)
            for row in rows:
                by_outcome[row.outcome] += 1
            ok = by_outcome.get("ok", 0)
            return {
                "total": len(rows),
                "ok": ok,
                "failed": len(rows) - ok,
                "pruned": sum(1 for r in rows if r.pruned),
                "confirm": sum(1 for r in rows if r.phase == "confirm"),
                "skipped_infeasible": state.skipped,
                "skipped_predicted_slow": state.skipped_slow,
                "search_budget": self.options.n_trials,
                "search_ended": state.end_reason(self.options.n_trials),
                "by_outcome": dict(by_outcome),
            }


def _memory_limited(winner: Config, searched: list[TrialRecord]) -> bool:
    """Whether a larger batch at the winner's precision ran out of memory."""
    return any(
        m.outcome == "oom"
        and m.config.amp == winner.amp
        and m.config.batch_size > winner.batch_size
        for m in searched
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
    _update_job(
        db,
        job_id,
        owner,
        status="running",
        started_at=job.started_at or utcnow(),
        error=None,
        finished_at=None,
    )
    try:
        with TrialLauncher(options.workload, options.device):  # the probe's and the trials'
            document = _JobRun(db, job_id, options, reporter, cancel, owner).run()
    except JobCancelled:
        _update_job(db, job_id, owner, status="cancelled", finished_at=utcnow())
    except AutotuneError as exc:
        _update_job(db, job_id, owner, status="failed", error=str(exc), finished_at=utcnow())
        reporter.job_finished(load_job(db, job_id))
        raise
    except KeyboardInterrupt as exc:
        release_interrupted(exc)  # Ctrl-C may have landed inside one of Optuna's statements
        _update_job(
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
        _update_job(
            db,
            job_id,
            owner,
            status="failed",
            error=f"internal error: {exc!r}",
            finished_at=utcnow(),
        )
        raise
    else:
        _update_job(
            db, job_id, owner, status="succeeded", recommendation=document, finished_at=utcnow()
        )
    job = load_job(db, job_id)
    reporter.job_finished(job)
    return job
