"""What goes over the wire: a family of schemas per resource, never the database models."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from autotune.store import TrialRecord
from autotune.tuner import TuneOptions

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled", "interrupted"]

_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d{1,2})?)$")


def _as_utc(value: datetime | None) -> datetime | None:
    # SQLite hands back naive datetimes; every time stored is UTC.
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


Timestamp = Annotated[datetime | None, AfterValidator(_as_utc)]


class JobCreate(TuneOptions):
    """A tuning job: the options of ``autotune run``; ``workload`` is a name from /v1/workloads.

    Unknown fields are refused, so a misspelt option never silently changes a job.
    """

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "workload": "builtin:image-cnn",
                    "n_trials": 30,
                    "fixed": {"amp": "bf16"},
                    "ranges": {"batch_size": "32..256"},
                }
            ]
        },
    )

    fresh: bool = Field(
        default=False,
        description="Measure again even where a succeeded job already answered the same question "
        "(the workload's source, the options that shape the answer, the device class and "
        "software); without it, that job is the answer (status 200).",
    )

    @field_validator("device")
    @classmethod
    def _device_is_named(cls, value: str) -> str:
        if not _DEVICE.match(value):
            raise ValueError(f"device {value!r} is not a device; use auto, cpu or cuda:N")
        return value


class BestTrialPublic(BaseModel):
    number: int
    phase: str
    samples_per_s: float
    config: dict[str, Any]


class ProgressPublic(BaseModel):
    #: Trials of the search measured so far (interrupted ones not counted).
    trials_done: int
    #: The job's ``n_trials``.
    trials_budget: int
    #: Re-measurements of the best candidates, after the search.
    confirm_done: int
    best: BestTrialPublic | None


class JobPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    workload: str
    workload_name: str | None
    status: JobStatus
    options: dict[str, Any]
    progress: ProgressPublic
    recommendation_ready: bool
    cancel_requested: bool
    error: str | None
    worker_id: str | None
    submitted_by: str | None = Field(
        default=None,
        description=(
            "The name of the API token that submitted the job (``local`` on a server without "
            "tokens); it, or an admin, may cancel the job."
        ),
    )
    attempts: int
    device: dict[str, Any] | None
    device_class: str | None = Field(
        description=(
            "The device class the job runs on: named at submission, else recorded by the first "
            "worker that ran it; only workers of this class claim it."
        )
    )
    measurement_set: int = Field(
        description=(
            "The measurement set progress and the recommendation come from; it goes up when the "
            "job resumed on other hardware or software (earlier sets' trials stay listed)."
        )
    )
    waiting_for: str | None = Field(
        default=None,
        description=(
            "Why a queued job is not running yet, e.g. no live worker has its device class."
        ),
    )
    created_at: Timestamp
    started_at: Timestamp
    finished_at: Timestamp
    heartbeat_at: Timestamp


class JobDetailPublic(JobPublic):
    """One job, read by its id: also its profile (left out of the job list, which stays small)."""

    profile: dict[str, Any] | None = Field(
        default=None,
        description=(
            "What the step alone (per batch size and precision) and the loader alone (per worker "
            "count) reached before the search, and the memory model: the shape of the "
            "recommendation's `profile`. Null for a job run without a profile, or before it has "
            "one."
        ),
    )


class JobsPublic(BaseModel):
    data: list[JobPublic]
    count: int = Field(description="Jobs matching the filter, on every page.")


class TrialPublic(TrialRecord):
    """Every stored field of one measured trial: its record and its place in the job."""

    number: int
    phase: str
    #: The process running the job stopped during this trial; it was retried once.
    interrupted: bool
    #: The job's measurement set the trial belongs to; only the job's current set is ranked.
    measurement_set: int


class TrialsPublic(BaseModel):
    data: list[TrialPublic]
    count: int


class WorkloadPublic(BaseModel):
    name: str = Field(description="What to pass as `workload` when submitting a job.")
    source: Literal["builtin", "entry_point", "directory"]


class WorkloadsPublic(BaseModel):
    data: list[WorkloadPublic]
    count: int


class CpuPublic(BaseModel):
    model: str
    count: int


class SystemPublic(BaseModel):
    devices: list[dict[str, Any]] = Field(description="GPUs seen by NVML (empty without one).")
    cpu: CpuPublic
    versions: dict[str, str | None]


class DeviceClassPublic(BaseModel):
    device_class: str = Field(description="What to pass as `device_class` when submitting.")
    workers: int = Field(description="Live workers serving this class.")


class DevicesPublic(BaseModel):
    """The device classes of the workers alive now (a worker counts while it polls)."""

    data: list[DeviceClassPublic]
    count: int


class Health(BaseModel):
    status: Literal["ok"]


class ErrorPublic(BaseModel):
    """FastAPI's error body: one sentence saying what is wrong and how to fix it."""

    detail: str


class ValidationErrorPublic(BaseModel):
    detail: list[dict[str, Any]]
