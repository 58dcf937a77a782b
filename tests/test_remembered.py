"""Answers remembered: the key naming the question a job answers, and the service answering a
repeated submission with the earlier job (``autotune run``'s side is in test_cli.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest_service import FAST_JOB, Service, start_service, wait_for

from autotune.store import Job, open_database, utcnow
from autotune.tuner import TuneOptions, answer_key, remembered_answer

MAIN = """\
import helper
from autotune import Workload

def workload() -> Workload:
    return helper.build()
"""


@pytest.fixture
def workload_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "main.py").write_text(MAIN)
    (folder / "helper.py").write_text("def build():\n    return None\n")
    (folder / "unrelated.py").write_text("X = 1\n")
    return folder


def key_of(workload: str, **options: object) -> str:
    return answer_key(TuneOptions(workload=workload, device="cpu", **options))


def test_the_key_follows_the_workload_file_and_the_modules_it_imports(
    workload_dir: Path,
) -> None:
    main = str(workload_dir / "main.py")
    before = key_of(main)
    assert key_of(main) == before

    (workload_dir / "unrelated.py").write_text("X = 2\n")  # not imported: not the workload
    assert key_of(main) == before

    (workload_dir / "helper.py").write_text("def build():\n    return 1\n")
    after_helper = key_of(main)
    assert after_helper != before

    (workload_dir / "main.py").write_text(MAIN + "\n# edited\n")
    assert key_of(main) not in (before, after_helper)
    assert key_of(f"{main}:other") != key_of(main)  # another function of the same file


def test_the_key_follows_the_options_that_shape_the_answer_only(workload_dir: Path) -> None:
    main = str(workload_dir / "main.py")
    before = key_of(main)
    for shaping in (
        {"n_trials": 21},
        {"fixed": {"amp": "bf16"}},
        {"max_memory": "1GB"},
        {"seed": 1},
        {"profile": False},
    ):
        assert key_of(main, **shaping) != before, shaping
    assert key_of(main, on_new_hardware="refuse") == before
    # Where the database or the recommendation file lie is no job option at all.
    assert {"db", "out", "resume", "job", "json", "quiet"}.isdisjoint(TuneOptions.model_fields)


def test_the_key_names_the_device_class(workload_dir: Path) -> None:
    main = str(workload_dir / "main.py")
    assert key_of(main, device_class="cpu: Another CPU, 3 cores") != key_of(main)


def test_a_module_workload_is_keyed_by_its_file_without_importing_it(
    workload_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = workload_dir / "remembered_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (package / "job.py").write_text("raise RuntimeError('imported')\n")
    monkeypatch.syspath_prepend(str(workload_dir))
    before = key_of("remembered_pkg.job:workload")
    assert "remembered_pkg" not in sys.modules
    (package / "job.py").write_text("raise RuntimeError('imported again')\n")
    assert key_of("remembered_pkg.job:workload") != before


def test_a_builtin_is_keyed_by_its_name() -> None:
    assert key_of("builtin:image-cnn") == key_of("builtin:image-cnn")
    assert key_of("builtin:image-cnn") != key_of("builtin:text-transformer")


def test_nothing_is_remembered_where_the_question_cannot_be_named_here(tmp_path: Path) -> None:
    database = open_database(f"sqlite:///{tmp_path / 'r.db'}")
    try:
        gone = TuneOptions(workload=str(tmp_path / "gone.py"))
        assert remembered_answer(database, gone) is None
    finally:
        database.dispose()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = start_service(tmp_path_factory.mktemp("remembered"))  # no worker: jobs stay queued
    yield running
    running.stop()


def _answer(service: Service, job_id: int) -> None:
    """Finish job ``job_id`` as its worker would: succeeded, with a recommendation and the key."""
    database = open_database(service.db_url)
    try:
        with database.session() as session:
            job = session.get(Job, job_id)
            assert job is not None
            job.status, job.finished_at = "succeeded", utcnow()
            job.recommendation = {"schema": "autotune.recommendation/v1", "config": {}}
            job.answer_key = answer_key(TuneOptions.model_validate(job.options))
    finally:
        database.dispose()


def test_a_repeated_submission_is_answered_by_the_earlier_job(service: Service) -> None:
    submission = {"workload": "tiny", **FAST_JOB}
    with service.client() as http:
        first = http.post("/v1/jobs", json=submission)
        assert first.status_code == 202, first.text
        job_id = first.json()["id"]
        queued = http.post("/v1/jobs", json=submission)  # not answered yet: a job of its own
        assert queued.status_code == 202 and queued.json()["id"] != job_id
        _answer(service, job_id)

        again = http.post("/v1/jobs", json=submission)
        assert again.status_code == 200, again.text
        assert again.json()["id"] == job_id and again.json()["status"] == "succeeded"
        assert again.headers["location"] == f"/v1/jobs/{job_id}"

        fresh = http.post("/v1/jobs", json={**submission, "fresh": True})
        assert fresh.status_code == 202 and fresh.json()["id"] not in (job_id, queued.json()["id"])
        other = http.post("/v1/jobs", json={**submission, "n_trials": FAST_JOB["n_trials"] + 1})
        assert other.status_code == 202


@pytest.mark.slow
def test_a_job_a_worker_answered_answers_the_same_submission(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The key the worker stores is the one the server asks for: same host, same install."""
    running = start_service(tmp_path_factory.mktemp("worked"), embedded_worker=True)
    submission = {"workload": "builtin:slow-storage", **FAST_JOB}
    try:
        with running.client() as http:
            job_id = http.post("/v1/jobs", json=submission).json()["id"]
            wait_for(
                lambda: (
                    http.get(f"/v1/jobs/{job_id}").json()["status"]
                    in ("succeeded", "failed", "cancelled")
                ),
                150,
                f"job {job_id} to finish",
            )
            again = http.post("/v1/jobs", json=submission)
            assert again.status_code == 200, running.logs()
            assert again.json()["id"] == job_id and again.json()["recommendation_ready"]
    finally:
        running.stop()
