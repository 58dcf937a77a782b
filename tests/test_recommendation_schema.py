"""The recommendation's JSON Schema: generated from the models that write the document, shipped
in the package, printed by ``autotune schema`` and declared by the REST endpoint."""

from __future__ import annotations

import copy
import json
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from autotune.errors import ConfigError
from autotune.recommend import (
    SCHEMA,
    CandidateRuns,
    Confirmation,
    RecommendationDocument,
    build_document,
    recommendation_json_schema,
    validate_recommendation,
)
from autotune.space import Config, DeviceInfo
from autotune.store import TrialRecord

jsonschema = pytest.importorskip("jsonschema")

SHIPPED = files("autotune.recommend") / "recommendation.schema.json"
DEVICE = DeviceInfo(type="cpu", name="test cpu", memory_bytes=16 * 2**30)
BASELINE = Config(batch_size=32)


def shipped_schema() -> dict[str, Any]:
    return json.loads(SHIPPED.read_text(encoding="utf-8"))


def runs(config: Config, *rates: float | None) -> list[TrialRecord]:
    return [
        TrialRecord(
            config=config,
            outcome="ok" if rate else "oom",
            samples_per_s=rate,
            step_time_median_ms=1000 * config.batch_size / rate if rate else None,
            data_wait_fraction=0.1 if rate else None,
            peak_host_memory_bytes=2**30 if rate else None,
            compile_s=4.0 if rate and config.compile != "off" else None,
            losses_finite=bool(rate),
        )
        for rate in rates
    ]


def built(winner_config: Config, baseline_rates: tuple[float | None, ...]) -> dict[str, Any]:
    """A document as ``build_document`` writes it, from confirmation runs made up here."""
    baseline = CandidateRuns(BASELINE, runs(BASELINE, *baseline_rates))
    winner = CandidateRuns(winner_config, runs(winner_config, 150.0, 156.0), run_samples=10**6)
    left = Config(batch_size=16)
    loser = CandidateRuns(left, runs(left, 90.0), left_after_round=1, left_because="slower")
    confirmation = Confirmation(
        baseline=baseline,
        candidates=[winner, loser],
        winner=winner,
        paired_ratios=[1.5, 1.48] if baseline.usable else [],
        rounds_run=2,
        rounds_planned=3,
        decided_because="the leader was clear",
    )
    return build_document(
        workload_name="builtin:tiny",
        device=DEVICE,
        confirmation=confirmation,
        search_runs=[*baseline.runs, *winner.runs, *loser.runs],
        trial_counts={"total": 5, "ok": 4, "failed": 1, "search_budget": 4, "by_outcome": {}},
        memory_limited=False,
        memory_budget_bytes=None,
        fingerprint={"torch": "2.x"},
        space={"batch_size": [16, 32, 64]},
        job_id=7,
        run={"samples": 10**6, "epochs": None, "steps": None},
        optimizer="AdamW",
    )


DOCUMENTS = {
    "larger batch, workers, retained memory, threads": lambda: built(
        Config(batch_size=64, num_workers=2, retain_freed_memory=True, intra_op_threads=2),
        (100.0, 104.0),
    ),
    "compiled, same batch": lambda: built(Config(batch_size=32, compile="default"), (100.0,)),
    "the baseline failed": lambda: built(Config(batch_size=16), (None,)),
}


@pytest.fixture(params=DOCUMENTS)
def document(request: pytest.FixtureRequest) -> dict[str, Any]:
    return DOCUMENTS[request.param]()


def schema_errors(document: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(shipped_schema())
    return [error.message for error in validator.iter_errors(document)]


def test_the_shipped_schema_is_the_generated_one() -> None:
    """Regenerate the file when this fails: ``autotune schema >
    autotune/recommend/recommendation.schema.json``."""
    assert shipped_schema() == recommendation_json_schema()
    jsonschema.Draft202012Validator.check_schema(shipped_schema())


def test_the_schema_names_its_version() -> None:
    schema = shipped_schema()
    assert schema["title"] == SCHEMA == "autotune.recommendation/v1"
    assert schema["$id"] == "urn:autotune:recommendation:v1"
    assert schema["properties"]["schema"]["const"] == SCHEMA


def test_autotune_schema_prints_the_shipped_file() -> None:
    from autotune.cli._app import app

    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == shipped_schema()


def test_a_written_document_validates_against_the_shipped_schema(
    document: dict[str, Any],
) -> None:
    assert schema_errors(document) == []
    validate_recommendation(document)


@pytest.mark.slow
def test_a_job_s_document_validates_against_the_shipped_schema(
    tmp_path: Path, workload_file: Any
) -> None:
    """A real job, its profile included, written by ``autotune run --out``."""
    from test_cli import FAST_FLAGS, autotune

    out = tmp_path / "best.json"
    flags = [flag for flag in FAST_FLAGS if flag != "--no-profile"]
    result = autotune(
        "run",
        workload_file("tiny"),
        "--trials",
        "2",
        "--db",
        str(tmp_path / "a.db"),
        "--out",
        str(out),
        "--device",
        "cpu",
        *flags,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    assert document["profile"] is not None
    assert schema_errors(document) == []
    assert undeclared(RecommendationDocument.model_validate(document)) == []


def undeclared(model: BaseModel, where: str = "") -> list[str]:
    """The keys of a document that its models do not name, dotted. The profile section names
    only its tables: the profile writes the rest."""
    found = [f"{where}{key}" for key in model.model_extra or {} if where != "profile."]
    for name in type(model).model_fields:
        values = getattr(model, name)
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, BaseModel):
                found += undeclared(value, f"{where}{name}.")
    return found


def test_the_drop_in_answer_carries_its_own_exports() -> None:
    document = DOCUMENTS["larger batch, workers, retained memory, threads"]()
    same = document["same_effective_batch"]
    assert same["config"]["batch_size"] == BASELINE.batch_size != document["config"]["batch_size"]
    kwargs = same["exports"]["hf_training_arguments"]
    assert kwargs["per_device_train_batch_size"] == same["config"]["batch_size"]
    assert document["exports"]["hf_training_arguments"]["per_device_train_batch_size"] == 64
    assert schema_errors(document) == []


def test_the_writer_writes_no_key_the_models_do_not_declare(document: dict[str, Any]) -> None:
    """Unknown keys are allowed to readers, so the writer is held to the declared ones."""
    assert undeclared(RecommendationDocument.model_validate(document)) == []


def test_a_document_the_writer_leaves_a_key_out_of_keeps_it_out() -> None:
    document = DOCUMENTS["larger batch, workers, retained memory, threads"]()
    assert "torch_compile" not in document["exports"]
    assert "environment" in document["exports"]
    assert "torch_compile" in DOCUMENTS["compiled, same batch"]()["exports"]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("diagnosis", ..., "lacks the required key 'diagnosis'"),
        ("metrics.step_time_ms", ..., "lacks the required key 'metrics.step_time_ms'"),
        ("device.memory_bytes", "16 GiB", "'device.memory_bytes' must be an integer, not str"),
        ("speedup", "2x", "'speedup' must be a number or null, not str"),
        ("trials.ok", 1.5, "'trials.ok' must be an integer, not float"),
        ("within_noise", "no", "'within_noise' must be a boolean, not str"),
        ("confirmation_rounds", None, "'confirmation_rounds' must be an object, not NoneType"),
        ("candidates", {}, "'candidates' must be a list, not dict"),
        ("metrics.runs", [150.0, "x"], "'metrics.runs.1' must be a number or null, not str"),
    ],
)
def test_a_broken_document_fails_both_checks(path: str, value: Any, message: str) -> None:
    broken = DOCUMENTS["larger batch, workers, retained memory, threads"]()
    *parents, last = path.split(".")
    section = broken
    for part in parents:
        section = section[part]
    if value is ...:
        del section[last]
    else:
        section[last] = value
    assert schema_errors(broken)
    with pytest.raises(ConfigError, match=message):
        validate_recommendation(broken)


def test_keys_of_a_later_version_are_allowed(document: dict[str, Any]) -> None:
    later = copy.deepcopy(document)
    later["a_later_field"] = {"any": "thing"}
    later["metrics"]["a_later_metric"] = 1
    later["exports"]["a_later_library"] = {"batch": 8}
    assert schema_errors(later) == []
    validate_recommendation(later)


def test_an_older_document_without_the_keys_added_since_is_valid() -> None:
    older = DOCUMENTS["larger batch, workers, retained memory, threads"]()
    for key in ("run", "same_effective_batch", "candidates", "verdict", "confirmation_rounds"):
        del older[key]
    for knob in ("compile", "retain_freed_memory", "intra_op_threads"):
        del older["config"][knob]
    assert schema_errors(older) == []
    validate_recommendation(older)


def test_the_rest_endpoint_declares_the_document() -> None:
    from api.main import create_app
    from api.settings import Settings

    openapi = create_app(Settings()).openapi()
    answer = openapi["paths"]["/v1/jobs/{job_id}/recommendation"]["get"]["responses"]["200"]
    ref = answer["content"]["application/json"]["schema"]["$ref"]
    assert ref == "#/components/schemas/RecommendationDocument"
    declared = openapi["components"]["schemas"]["RecommendationDocument"]
    assert declared["properties"]["schema"]["const"] == SCHEMA
    assert {"workload", "config", "metrics", "speedup", "exports"} <= set(declared["required"])
