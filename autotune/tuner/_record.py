"""Turning a trial process's result into a stored row, and rows back into measurements."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from autotune.recommend import Measurement
from autotune.runner import TrialResult
from autotune.space import Config
from autotune.store import Trial


def next_trial_number(session: Session, job_id: int) -> int:
    current = session.scalar(select(func.max(Trial.number)).where(Trial.job_id == job_id))
    return (current or 0) + 1


def trial_row(
    job_id: int,
    number: int,
    phase: str,
    result: TrialResult,
    optuna_number: int | None,
    memory_budget_bytes: int | None,
) -> Trial:
    metrics = result.metrics
    peak = result.peak_memory_bytes
    within_budget = None if memory_budget_bytes is None or peak is None else (
        peak <= memory_budget_bytes and result.outcome != "oom"
    )
    if result.outcome == "nonfinite":
        losses_finite: bool | None = False
    else:
        losses_finite = metrics.get("losses_finite") if result.outcome == "ok" else None
    return Trial(
        job_id=job_id,
        number=number,
        optuna_number=optuna_number,
        phase=phase,
        config=result.config.public_dict(),
        config_key=result.config.key(),
        outcome=result.outcome,
        pruned=result.pruned,
        within_budget=within_budget,
        samples_per_s=metrics.get("samples_per_s"),
        step_time_median_ms=metrics.get("step_time_median_ms"),
        step_time_p90_ms=metrics.get("step_time_p90_ms"),
        data_wait_fraction=metrics.get("data_wait_fraction"),
        copy_wait_fraction=metrics.get("copy_wait_fraction"),
        epoch_restart_s=metrics.get("epoch_restart_s"),
        steps_per_epoch=metrics.get("steps_per_epoch"),
        peak_memory_bytes=peak,
        peak_memory_allocated_bytes=metrics.get("peak_memory_allocated_bytes"),
        peak_memory_reserved_bytes=metrics.get("peak_memory_reserved_bytes"),
        peak_host_memory_bytes=result.peak_host_memory_bytes,
        device_utilization=result.device_utilization,
        losses_finite=losses_finite,
        steps=metrics.get("steps"),
        warmup_steps=metrics.get("warmup_steps"),
        window_s=metrics.get("window_s"),
        error=result.error,
        exit_code=result.exit_code,
        signal=result.signal,
        fingerprint=result.fingerprint,
        started_at=result.started_at,
        finished_at=result.finished_at,
        duration_s=result.duration_s,
    )


def measurement_of(trial: Trial) -> Measurement:
    return Measurement(
        config=Config.model_validate(trial.config),
        outcome=trial.outcome,
        usable=trial.usable,
        samples_per_s=trial.samples_per_s,
        step_time_ms=trial.step_time_median_ms,
        data_wait_fraction=trial.data_wait_fraction,
        peak_memory_bytes=trial.peak_memory_bytes,
        peak_host_memory_bytes=trial.peak_host_memory_bytes,
        device_utilization=trial.device_utilization,
    )


def ran_out_of_memory(trial: Trial) -> bool:
    return trial.outcome == "oom" or trial.within_budget is False
