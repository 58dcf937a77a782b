"""A job runs only on the device class it was submitted for (or first ran on)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FAST, WORKLOADS
from pydantic import ValidationError
from sqlalchemy import func, select

from autotune.errors import ConfigError
from autotune.measure import device_identity
from autotune.store import Trial, open_database
from autotune.tuner import TuneOptions, create_job, load_job, run_job


@pytest.mark.slow
def test_a_job_submitted_for_other_hardware_is_refused_and_keeps_its_trials(
    tmp_path: Path,
) -> None:
    db = open_database(str(tmp_path / "jobs.db"))
    try:
        options = TuneOptions(
            workload=str(WORKLOADS / "tiny.py"),
            n_trials=2,
            device="auto",
            confirm_rounds=1,
            confirm_top=1,
            device_class="cuda: NVIDIA H100 80GB HBM3",
            **FAST,
        )
        job_id = create_job(db, options, status="running")
        assert load_job(db, job_id).device_class == "cuda: NVIDIA H100 80GB HBM3"
        with pytest.raises(
            ConfigError,
            match=r"submitted for 'cuda: NVIDIA H100 80GB HBM3' "
            r"but this device is 'cpu: .*submit a new job",
        ):
            run_job(db, job_id)
        job = load_job(db, job_id)
        assert job.status == "failed" and job.device_class == "cuda: NVIDIA H100 80GB HBM3"
        with db.session() as session:
            assert session.scalar(select(func.count()).select_from(Trial)) == 0
    finally:
        db.dispose()


@pytest.mark.parametrize(
    ("device_class", "device", "complaint"),
    [
        ("H100", "auto", "is not 'cuda: MODEL' or 'cpu: MODEL, N cores'"),
        ("cpu: AMD EPYC 9454", "auto", "is not 'cuda: MODEL' or 'cpu: MODEL, N cores'"),
        ("cuda: NVIDIA H100 80GB HBM3", "cpu", "cannot run a job for device class"),
    ],
)
def test_a_malformed_or_contradictory_device_class_is_refused(
    device_class: str,
    device: str,
    complaint: str,
) -> None:
    with pytest.raises(ValidationError, match=complaint):
        TuneOptions(workload="builtin:image-cnn", device=device, device_class=device_class)


@pytest.mark.slow
def test_a_job_records_the_device_class_it_runs_on(tmp_path: Path) -> None:
    db = open_database(str(tmp_path / "jobs.db"))
    try:
        options = TuneOptions(
            workload=str(WORKLOADS / "tiny.py"),
            n_trials=2,
            device="cpu",
            confirm_rounds=1,
            confirm_top=1,
            profile=False,
            **FAST,
        )
        job = run_job(db, create_job(db, options, status="running"))
        assert job.status == "succeeded"
        assert job.device_class == device_identity("cpu").device_class
    finally:
        db.dispose()
