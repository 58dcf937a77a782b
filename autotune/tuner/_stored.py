"""The job's rows in the database: creating, loading and updating a job, storing its trials,
and reading back what one measurement set holds (the searched trials, their counts, and what
an interrupted attempt left to resume from)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import optuna
from sqlalchemy import select

from autotune.errors import AutotuneError
from autotune.search import (
    InfeasibleSet,
    Observation,
    SearchState,
    config_from_params,
    fail_interrupted_trials,
)
from autotune.space import Config, SearchSpace
from autotune.store import (
    Database,
    Job,
    Trial,
    TrialRecord,
    lock_owned_job,
    next_trial_number,
    utcnow,
)
from autotune.tuner._options import TuneOptions
from autotune.tuner._record import trial_row


def create_job(
    db: Database, options: TuneOptions, status: str = "queued", submitted_by: str | None = None
) -> int:
    """Store a new job and return its id; ``submitted_by`` names the API token that sent it.

    A job the caller runs itself (the CLI) is created ``running``, so that no worker sharing
    the database claims it first.
    """
    with db.session(immediate=True) as session:
        job = Job(
            workload=options.workload,
            options=options.model_dump(),
            status=status,
            device_class=options.device_class,
            submitted_by=submitted_by,
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


def update_job(db: Database, job_id: int, owner: str | None = None, **values: Any) -> None:
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


class JobTrials:
    """The trials of one job's measurement set, written while ``owner`` holds the job."""

    def __init__(self, db: Database, job_id: int, owner: str | None) -> None:
        self.db = db
        self.job_id = job_id
        self.owner = owner
        #: The measurement set stored into and read: a new one where the job moved to other
        #: hardware.
        self.measurement_set = 1

    def store(
        self,
        record: TrialRecord,
        phase: str,
        optuna_number: int | None,
        interrupted: bool = False,
    ) -> Trial:
        """Store ``record`` as the job's next trial, run for ``phase``; returns its row."""
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
            if interrupted:
                row.interrupted = True
            session.add(row)
            session.flush()
            session.expunge(row)
        return row

    def store_interrupted(self, config: Config, phase: str, optuna_number: int) -> None:
        """Store a trial the process running the job stopped during."""
        noted = utcnow()  # when the interruption was found: the trial's own times are lost
        record = TrialRecord(
            outcome="crashed",
            config=config,
            started_at=noted,
            finished_at=noted,
            error="interrupted: the process running the job stopped during this trial; "
            "it is retried once",
        )
        self.store(record, phase, optuna_number, interrupted=True)

    def rows(self) -> list[Trial]:
        """Every trial of the set, an interrupted one's too."""
        with self.db.session() as session:
            rows = list(
                session.scalars(
                    select(Trial).where(
                        Trial.job_id == self.job_id, Trial.measurement_set == self.measurement_set
                    )
                )
            )
            session.expunge_all()
        return rows

    def searched_records(self, confirmed: bool = False) -> list[TrialRecord]:
        """The set's trials that ran to an end; the confirmation's runs too with
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

    def resume(
        self, study: optuna.Study, space: SearchSpace, run_samples: int | None
    ) -> tuple[SearchState, list[Trial]]:
        """What earlier attempts at this job measured (the search's state, and the
        confirmation's runs), re-queueing an interrupted trial once."""
        state = SearchState(InfeasibleSet(space.over_host))
        rows = self.rows()
        searched = [r for r in rows if r.phase != "confirm" and not r.interrupted]
        for row in sorted(searched, key=lambda r: r.number):
            record = TrialRecord.model_validate(row)
            value = record.samples_per_s_over(run_samples) if record.usable else None
            state.remember(
                record.config,
                Observation(
                    value or 0.0,
                    pruned=record.pruned,
                    out_of_memory=record.ran_out_of_memory,
                    unsuited=record.error if record.outcome == "unsuited" else None,
                ),
            )
        retried = {r.config_key for r in rows if r.interrupted}
        for frozen in fail_interrupted_trials(study):
            config = config_from_params(space, frozen.params)
            phase = str(frozen.user_attrs.get("phase", "search"))
            self.store_interrupted(config, phase, frozen.number)
            if config.key() not in retried and config.key() not in state.values:
                study.enqueue_trial(frozen.params, user_attrs={"phase": phase})
        confirm_rows = [r for r in rows if r.phase == "confirm" and not r.interrupted]
        return state, confirm_rows

    def counts(self, state: SearchState, n_trials: int) -> dict[str, Any]:
        """The set's trials counted by outcome and phase, and how its search ended."""
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
                "search_budget": n_trials,
                "search_ended": state.end_reason(n_trials),
                "by_outcome": dict(by_outcome),
            }
