"""A job's measurements never mix hardware: it runs only on the device class it started on."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FAST, WORKLOADS
from sqlalchemy import func, select, update

from autotune.errors import ConfigError
from autotune.measure import device_identity
from autotune.store import Job, Trial, open_database
from autotune.tuner import TuneOptions, create_job, load_job, run_job


def test_a_job_started_on_other_hardware_is_refused_and_keeps_its_trials(tmp_path: Path) -> None:
    db = open_database(str(tmp_path / "jobs.db"))
    try:
        options = TuneOptions(workload=str(WORKLOADS / "tiny.py"), n_trials=2, device="cpu",
                              confirm_rounds=1, confirm_top=1, **FAST)
        job_id = create_job(db, options, status="running")
        with db.session() as session:  # as if its first trials ran on a GPU elsewhere
            session.execute(update(Job).where(Job.id == job_id).values(
                device_class="cuda: NVIDIA H100 80GB HBM3"))
        with pytest.raises(ConfigError, match=r"runs on 'cuda: NVIDIA H100 80GB HBM3' but "
                                              r"this device is 'cpu: .*submit a new job"):
            run_job(db, job_id)
        job = load_job(db, job_id)
        assert job.status == "failed" and job.device_class == "cuda: NVIDIA H100 80GB HBM3"
        with db.session() as session:
            assert session.scalar(select(func.count()).select_from(Trial)) == 0
    finally:
        db.dispose()


def test_a_job_records_the_device_class_it_runs_on(tmp_path: Path) -> None:
    db = open_database(str(tmp_path / "jobs.db"))
    try:
        options = TuneOptions(workload=str(WORKLOADS / "tiny.py"), n_trials=2, device="cpu",
                              confirm_rounds=1, confirm_top=1, **FAST)
        job = run_job(db, create_job(db, options, status="running"))
        assert job.status == "succeeded"
        assert job.device_class == device_identity("cpu").device_class
    finally:
        db.dispose()
