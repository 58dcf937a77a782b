"""Where a job runs: refusing a device of another class than it was submitted for, and the
measurement set a run adds to (a new one where the hardware or software changed, since
measurements are only ranked within one set)."""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from autotune.errors import ConfigError
from autotune.measure import fingerprint_differences
from autotune.store import Job, Trial
from autotune.tuner._reporter import Reporter


def check_device_class(job: Job, needed: str | None, this_device: str) -> None:
    """Refuse to run a job that was submitted for the device class ``needed`` on a device of
    class ``this_device``.

    A class the job only recorded when it first ran is no requirement: running elsewhere is
    then a change of hardware like any other (see :func:`measurement_set_for`).
    """
    if needed is not None and needed != this_device:
        raise ConfigError(
            f"job {job.id} was submitted for {needed!r} but this device is "
            f"{this_device!r}; run it on a matching device or submit a new job for this one"
        )


def measurement_set_for(
    session: Session,
    job: Job,
    current: dict[str, Any],
    on_new_hardware: Literal["fresh", "refuse"],
    reporter: Reporter,
) -> int:
    """The measurement set this run adds to: the job's, or a new one on other hardware.

    Measurements are only ranked within one set. A job resumed or taken over where the
    fingerprint's comparable part differs (see :func:`autotune.measure.comparable_identity`)
    starts a new set when ``on_new_hardware`` is ``fresh``, keeping the old trials for
    reading; with ``refuse`` it fails, and nothing stored changes. A set with no trials yet is
    simply adopted.
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
    if on_new_hardware == "refuse":
        raise ConfigError(
            f"job {job.id} was measured on other hardware or software than this "
            f"({', '.join(changes)}) and its on_new_hardware option is 'refuse'; run it "
            "where these match, or submit it again with on_new_hardware 'fresh' to "
            "measure it anew here"
        )
    reporter.measurement_set_started(measurement_set + 1, changes)
    return measurement_set + 1
