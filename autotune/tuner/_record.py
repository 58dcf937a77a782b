"""Storing a trial's record as a row of its job (rows read back with ``TrialRecord``)."""

from __future__ import annotations

from autotune.store import Trial, TrialRecord


def trial_row(
    job_id: int,
    number: int,
    phase: str,
    record: TrialRecord,
    optuna_number: int | None,
    measurement_set: int = 1,
) -> Trial:
    """The row of ``record`` as trial ``number`` of job ``job_id``, run for ``phase`` in its
    ``measurement_set``."""
    return Trial(
        job_id=job_id,
        number=number,
        optuna_number=optuna_number,
        phase=phase,
        measurement_set=measurement_set,
        **record.columns(),
    )
