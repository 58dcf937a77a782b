"""Measurements never mix hardware: a job resumed where the fingerprint differs measures anew.

The fingerprint differs honestly here: the resumed run is given fewer CPU cores through its
CPU affinity, which every trial process inherits and the fingerprint reads (``cpu_count``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import optuna
import pytest
from conftest import FAST, WORKLOADS
from conftest_service import database, database_url  # noqa: F401 (fixtures)
from sqlalchemy import select

from autotune.errors import ConfigError
from autotune.measure import comparable_identity, fingerprint_differences
from autotune.report import job_page_data
from autotune.search import study_name_for
from autotune.store import Database, Trial
from autotune.tuner import Reporter, TuneOptions, create_job, load_job, run_job

ALL_CORES = sorted(os.sched_getaffinity(0))
needs_two_cores = pytest.mark.skipif(
    len(ALL_CORES) < 2, reason="needs two CPU cores to resume on fewer"
)


# -- the rule ------------------------------------------------------------------------------------


def test_the_gpu_serial_host_memory_and_kernel_do_not_split_measurements() -> None:
    gpu = {
        "device_type": "cuda",
        "device_name": "NVIDIA H100 80GB HBM3",
        "device_memory_bytes": 85_000_000_000,
        "device_uuid": "GPU-aaaa",
        "compute_capability": [9, 0],
        "cpu_model": "AMD EPYC 9454",
        "cpu_count": 16,
        "host_memory_bytes": 2 * 10**12,
        "torch": "2.13.0",
        "cuda": "12.8",
        "cudnn": 91000,
        "python": "3.12.3",
        "platform": "Linux-6.8.0-45-generic-x86_64",
    }
    another_of_the_model = {
        **gpu,
        "device_uuid": "GPU-bbbb",
        "host_memory_bytes": 10**12,
        "platform": "Linux-6.8.0-47-generic-x86_64",
    }
    assert comparable_identity(gpu) == comparable_identity(another_of_the_model)
    assert fingerprint_differences(gpu, another_of_the_model) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("torch", "2.12.0"),
        ("cuda", "12.6"),
        ("cudnn", 90100),
        ("python", "3.13.1"),
        ("device_name", "NVIDIA H200"),
        ("device_memory_bytes", 40_000_000_000),
        ("compute_capability", [8, 0]),
        ("cpu_model", "Intel Xeon 8480+"),
        ("cpu_count", 8),
    ],
)
def test_versions_and_the_hardware_model_split_measurements(field: str, value: object) -> None:
    gpu = {
        "device_type": "cuda",
        "device_name": "NVIDIA H100 80GB HBM3",
        "device_memory_bytes": 85_000_000_000,
        "compute_capability": [9, 0],
        "cpu_model": "AMD EPYC 9454",
        "cpu_count": 16,
        "torch": "2.13.0",
        "cuda": "12.8",
        "cudnn": 91000,
        "python": "3.12.3",
    }
    changed = {**gpu, field: value}
    assert fingerprint_differences(gpu, changed) == [f"{field} {gpu[field]} -> {value}"]


def test_a_cpu_s_memory_is_the_host_s_and_does_not_split_measurements() -> None:
    cpu = {
        "device_type": "cpu",
        "device_name": "AMD EPYC 9454",
        "device_memory_bytes": 10**12,
        "cpu_model": "AMD EPYC 9454",
        "cpu_count": 16,
        "torch": "2.13.0",
    }
    assert fingerprint_differences(cpu, {**cpu, "device_memory_bytes": 10**12 - 2**20}) == []


# -- a job that moves ------------------------------------------------------------------------------


@contextlib.contextmanager
def cores(count: int) -> Iterator[None]:
    """Run the block (and every process it starts) on the first ``count`` cores only."""
    os.sched_setaffinity(0, ALL_CORES[:count])
    try:
        yield
    finally:
        os.sched_setaffinity(0, ALL_CORES)


class StopAfterFirstTrial(Reporter):
    """Cancels the job once its first trial is stored, as a worker's shutdown would."""

    def __init__(self, cancel: threading.Event) -> None:
        self.cancel = cancel

    def trial_finished(self, trial: Trial) -> None:
        self.cancel.set()


def run_partly(db: Database, on_new_hardware: str) -> int:
    options = TuneOptions(
        workload=str(WORKLOADS / "tiny.py"),
        n_trials=2,
        device="cpu",
        confirm_rounds=1,
        confirm_top=1,
        on_new_hardware=on_new_hardware,
        **FAST,
    )
    job_id = create_job(db, options, status="running")
    cancel = threading.Event()
    assert run_job(db, job_id, StopAfterFirstTrial(cancel), cancel=cancel).status == "cancelled"
    return job_id


def trials_of(db: Database, job_id: int) -> list[Trial]:
    with db.session() as session:
        rows = list(
            session.scalars(select(Trial).where(Trial.job_id == job_id).order_by(Trial.number))
        )
        session.expunge_all()
        return rows


def completed_in_study(db: Database, name: str) -> int:
    study = optuna.load_study(study_name=name, storage=db.url)
    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


@pytest.mark.slow
@needs_two_cores
def test_a_job_resumed_on_fewer_cores_measures_anew_and_keeps_the_old_trials(
    database: Database,  # noqa: F811
) -> None:
    job_id = run_partly(database, "fresh")
    before = trials_of(database, job_id)
    assert before and {t.measurement_set for t in before} == {1}
    assert {t.fingerprint["cpu_count"] for t in before} == {len(ALL_CORES)}
    assert completed_in_study(database, study_name_for(job_id)) == 1

    with cores(1):
        job = run_job(database, job_id)

    assert job.status == "succeeded", job.error
    assert job.measurement_set == 2 and job.fingerprint is not None
    assert job.fingerprint["cpu_count"] == 1 and job.device_class.endswith(", 1 cores")
    after = trials_of(database, job_id)
    kept = [t for t in after if t.measurement_set == 1]
    assert [(t.id, t.samples_per_s) for t in kept] == [(t.id, t.samples_per_s) for t in before]
    fresh = [t for t in after if t.measurement_set == 2]
    assert {t.fingerprint["cpu_count"] for t in fresh if t.fingerprint} == {1}
    # The search of the new set starts from nothing: its own study, its full budget.
    searched = [t for t in fresh if t.phase != "confirm" and not t.interrupted]
    assert len(searched) == 2
    assert completed_in_study(database, study_name_for(job_id, 2)) == len(
        [t for t in searched if t.optuna_number is not None]
    )
    assert completed_in_study(database, study_name_for(job_id)) == 1
    # The recommendation is the new set's: its counts and fingerprint, its trials only.
    document = job.recommendation
    assert document is not None
    assert document["fingerprint"]["cpu_count"] == 1
    assert document["trials"]["total"] == len([t for t in fresh if not t.interrupted])
    # Old trials stay visible to a reader, marked with their set; progress counts the new one.
    with database.session() as session:
        page = job_page_data(session, job_id)
    assert [t["measurement_set"] for t in page["trials"]] == [t.measurement_set for t in after]
    assert page["job"]["measurement_set"] == 2
    assert page["job"]["progress"]["trials_done"] == len(searched)


@pytest.mark.slow
@needs_two_cores
def test_a_job_that_refuses_new_hardware_fails_saying_why_and_loses_nothing(
    database: Database,  # noqa: F811
) -> None:
    job_id = run_partly(database, "refuse")
    before = trials_of(database, job_id)
    fingerprint = load_job(database, job_id).fingerprint

    with cores(1), pytest.raises(ConfigError) as refused:
        run_job(database, job_id)

    message = str(refused.value)
    assert message == load_job(database, job_id).error
    assert f"cpu_count {len(ALL_CORES)} -> 1" in message
    assert "on_new_hardware option is 'refuse'" in message and "'fresh'" in message
    assert message.count(". ") == 0 and "\n" not in message  # one sentence
    job = load_job(database, job_id)
    assert job.status == "failed" and job.measurement_set == 1
    assert job.fingerprint == fingerprint
    assert [
        (t.id, t.number, t.measurement_set, t.samples_per_s) for t in trials_of(database, job_id)
    ] == [(t.id, t.number, 1, t.samples_per_s) for t in before]


@pytest.mark.slow
@needs_two_cores
def test_a_job_resumed_on_the_same_hardware_keeps_its_set(
    database: Database,  # noqa: F811
) -> None:
    job_id = run_partly(database, "refuse")  # refuse: a spurious difference would fail it
    job = run_job(database, job_id)
    assert job.status == "succeeded", job.error
    assert job.measurement_set == 1
    assert {t.measurement_set for t in trials_of(database, job_id)} == {1}
