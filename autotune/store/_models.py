"""SQLAlchemy models: one row per tuning job and one per measured trial."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal, get_args

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

#: Job states. ``interrupted`` is a CLI run stopped by Ctrl-C or a kill, resumable.
JOB_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled", "interrupted")
#: Trial outcomes. Only ``ok`` trials within the memory budget can be recommended;
#: ``unsuited``: a knob's value the workload's step cannot use (its batches change shape under
#: CUDA graphs), which the job then sets aside.
Outcome = Literal["ok", "oom", "nonfinite", "timeout", "error", "crashed", "unsuited"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
#: Why a trial was run: the search, its seeded first trials (the baseline, the checklist, and
#: the configurations the profile predicts best or knows least), confirmation, or `bench`.
PHASES = ("baseline", "checklist", "predicted", "search", "confirm", "bench")


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and read back as an aware UTC datetime on every backend.

    SQLite has no time zones: without this it would return naive datetimes and store an
    aware non-UTC time at the wrong instant.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given; use an aware one, e.g. utcnow()")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class Job(Base):
    """A tuning job: one workload on one device, searched then confirmed."""

    __tablename__ = "autotune_jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload: Mapped[str] = mapped_column(String(1024))
    workload_name: Mapped[str | None] = mapped_column(String(256))
    status: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    #: The job's options (TuneOptions as JSON): trials, budgets, fixed knobs, ranges.
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    study_name: Mapped[str | None] = mapped_column(String(256))
    device: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    #: The device class the job must run on (``cuda: <GPU name>``, ``cpu: <CPU model>, N
    #: cores``): set at submission or by its first worker; only matching workers claim it.
    device_class: Mapped[str | None] = mapped_column(String(512), index=True)
    #: The fingerprint of the job's current measurement set (see ``measurement_set``).
    fingerprint: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    #: The measurement set the job ranks and recommends from: it starts at 1 and goes up when
    #: the job is resumed on hardware or software whose measurements are not comparable.
    measurement_set: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    space: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    #: The profile (the step alone, the loader alone, the memory model), measured once; a
    #: resumed job reuses it. ``{"error": ...}`` when profiling failed; null when it was off.
    profile: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    recommendation: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    #: The sha256 of the question the job answers (its workload's source, the options that shape
    #: the answer, the device class and software: see ``autotune.tuner.answer_key``), set when it
    #: runs: a new job with the key of a succeeded one is answered by it.
    answer_key: Mapped[str | None] = mapped_column(String(64), index=True)
    error: Mapped[str | None] = mapped_column(Text)
    worker_id: Mapped[str | None] = mapped_column(String(256))
    #: The name of the API token that submitted the job (``local`` without tokens; null when
    #: the CLI created it): it, or an admin, may cancel the job.
    submitted_by: Mapped[str | None] = mapped_column(String(64))
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    trials: Mapped[list[Trial]] = relationship(
        back_populates="job", order_by="Trial.number", cascade="all, delete-orphan"
    )


class LiveWorker(Base):
    """A live worker: the device class it serves, refreshed while it runs (``GET /v1/devices``)."""

    __tablename__ = "autotune_workers"

    id: Mapped[str] = mapped_column(String(256), primary_key=True)
    device_class: Mapped[str] = mapped_column(String(512), index=True)
    #: The worker's last sign of life, on the database's clock.
    seen_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Trial(Base):
    """One configuration measured once, in its own process: a stored
    :class:`~autotune.store.TrialRecord` (read it back with ``TrialRecord.model_validate``)."""

    __tablename__ = "autotune_trials"
    __table_args__ = (
        Index("ix_autotune_trials_job_key", "job_id", "config_key"),
        Index("uq_autotune_trials_job_number", "job_id", "number", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("autotune_jobs.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    optuna_number: Mapped[int | None] = mapped_column(Integer)
    phase: Mapped[str] = mapped_column(String(16), default="search")
    #: The job's measurement set this trial belongs to: trials of earlier sets ran on other
    #: hardware or software and are kept for reading, never ranked with the current set.
    measurement_set: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    config_key: Mapped[str] = mapped_column(String(1024))
    outcome: Mapped[str] = mapped_column(String(16))
    #: Stopped early by the pruner because it was clearly slower than the best so far.
    pruned: Mapped[bool] = mapped_column(Boolean, default=False)
    #: Pruned before its timed window began: its warm-up rate was already far below the best.
    pruned_during_warmup: Mapped[bool] = mapped_column(Boolean, default=False)
    #: The process running the job stopped during this trial; it is retried once on resume.
    interrupted: Mapped[bool] = mapped_column(Boolean, default=False)
    #: False when its peak memory exceeded the job's memory budget.
    within_budget: Mapped[bool | None] = mapped_column(Boolean)
    samples_per_s: Mapped[float | None] = mapped_column(Float)
    #: What the job's profile predicted for this configuration, before it ran.
    predicted_samples_per_s: Mapped[float | None] = mapped_column(Float)
    #: The scale the job's trials before this one ran at against the profile (see
    #: ``TrialRecord.prediction_scale``): the job's prediction is the product of the two.
    prediction_scale: Mapped[float | None] = mapped_column(Float)
    step_time_median_ms: Mapped[float | None] = mapped_column(Float)
    step_time_p90_ms: Mapped[float | None] = mapped_column(Float)
    #: Share of the window inside the DataLoader's ``next()`` (not copies, not device waits).
    data_wait_fraction: Mapped[float | None] = mapped_column(Float)
    #: Share of the window the host spent copying batches to the device (0 on a CPU).
    copy_wait_fraction: Mapped[float | None] = mapped_column(Float)
    #: Seconds an epoch start costs beyond an ordinary batch (amortised into samples_per_s).
    epoch_restart_s: Mapped[float | None] = mapped_column(Float)
    steps_per_epoch: Mapped[int | None] = mapped_column(Integer)
    peak_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    peak_memory_allocated_bytes: Mapped[int | None] = mapped_column(BigInteger)
    peak_memory_reserved_bytes: Mapped[int | None] = mapped_column(BigInteger)
    peak_host_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    #: Mean GPU busy fraction (0..1) over the window, from NVML.
    device_utilization: Mapped[float | None] = mapped_column(Float)
    losses_finite: Mapped[bool | None] = mapped_column(Boolean)
    #: Seconds torch.compile added to the steps that compiled; not part of samples_per_s.
    compile_s: Mapped[float | None] = mapped_column(Float)
    steps: Mapped[int | None] = mapped_column(Integer)
    warmup_steps: Mapped[int | None] = mapped_column(Integer)
    window_s: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    signal: Mapped[str | None] = mapped_column(String(32))
    fingerprint: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    duration_s: Mapped[float | None] = mapped_column(Float)

    job: Mapped[Job] = relationship(back_populates="trials")
