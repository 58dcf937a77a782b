"""The recommendation document as models: the one source of what ``build_document`` writes,
what ``validate_recommendation`` accepts and the JSON Schema that ``autotune schema`` prints.

Every section allows keys it does not name, so documents of later versions still read; a key
older documents lack is optional (``None`` when absent) rather than required. Numbers keep
the JSON type they were written with (an integer stays an integer).
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    RootModel,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    WithJsonSchema,
)
from pydantic.json_schema import SkipJsonSchema

from autotune.space import Config

#: The document's ``schema`` field: its kind and version. A change that a reader of this
#: version would misread (a field renamed, retyped, or made required) needs a new version.
SchemaVersion = Literal["autotune.recommendation/v1"]
SCHEMA: str = get_args(SchemaVersion)[0]

#: Knobs a v1 document written before they existed lacks, and the value it was measured with.
KNOBS_ADDED_LATER: dict[str, Any] = {
    "compile": "off",
    "retain_freed_memory": False,
    "intra_op_threads": None,
    "optimizer_impl": "default",
    "expandable_segments": False,
    "in_order": True,
}


def _describe_knobs(schema: dict[str, Any]) -> None:
    """The knobs as :class:`Config` declares them."""
    schema["properties"] = Config.model_json_schema()["properties"]
    schema["required"] = [name for name in Config.model_fields if name not in KNOBS_ADDED_LATER]


class Knobs(RootModel[dict[str, Any]]):
    """The value of every knob; a document written before a knob existed lacks it (it was
    measured with the knob's default), and keys that are not knobs are ignored. Checked knob
    by knob when read (``read_config``)."""

    model_config = ConfigDict(json_schema_extra=_describe_knobs)


#: A JSON number, integer or not; the value keeps the type it was written with.
Number = Annotated[StrictInt | StrictFloat, WithJsonSchema({"type": "number"})]
#: Keyword arguments for a library's call: names and values are the library's.
Kwargs = dict[str, Any]

_T = TypeVar("_T")


def _refuse_null(value: Any) -> Any:
    if value is None:
        raise ValueError("the key may be left out, but not null")
    return value


#: A key that older documents, or a section that does not apply, leave out: ``None`` in the
#: model when absent, and never null in the document.
Omittable = Annotated[_T | SkipJsonSchema[None], BeforeValidator(_refuse_null)]


def _no_null_defaults(schema: dict[str, Any]) -> None:
    """An omittable key's schema says what it is when present, without a null default."""
    for key in schema.get("properties", {}).values():
        admits_null = any(option.get("type") == "null" for option in key.get("anyOf", []))
        if key.get("default", ...) is None and not admits_null:
            del key["default"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", json_schema_extra=_no_null_defaults)


class Device(_Section):
    """The device the job measured on."""

    type: StrictStr = Field(description="``cuda`` or ``cpu``.")
    name: StrictStr
    memory_bytes: StrictInt


class Metrics(_Section):
    """The recommendation's confirmation runs: medians, and the peaks over them."""

    samples_per_s: Number = Field(description="Steady state, compile time left out.")
    run_samples_per_s: Omittable[Number] = Field(
        None, description="Over the run the candidates were ranked for, compile time charged."
    )
    compile_s: Number | None = None
    step_time_ms: Number
    peak_memory_bytes: StrictInt | None = Field(
        description="Reserved CUDA memory; on a CPU, the host's peak; null when not measured."
    )
    peak_host_memory_bytes: StrictInt | None
    data_wait_fraction: Number
    device_utilization: Number | None = None
    runs: Omittable[list[Number | None]] = Field(None, description="Samples/s of each run.")


class MeasuredMetrics(_Section):
    """A configuration's confirmation runs, as :class:`Metrics`; every figure is null when
    its runs failed (ran out of memory, say)."""

    samples_per_s: Number | None
    run_samples_per_s: Omittable[Number] = None
    compile_s: Number | None = None
    step_time_ms: Number | None
    peak_memory_bytes: Number | None
    peak_host_memory_bytes: Number | None
    data_wait_fraction: Number | None
    device_utilization: Number | None = None
    runs: Omittable[list[Number | None]] = None


class Baseline(_Section):
    """The user's own settings, re-measured beside the recommendation."""

    config: Knobs
    metrics: MeasuredMetrics


class RunLength(_Section):
    """The run the candidates were ranked for: one of the three is set."""

    samples: StrictInt | None = None
    epochs: StrictInt | None = None
    steps: StrictInt | None = None


class SameEffectiveBatch(_Section):
    """The fastest configuration that keeps the baseline's effective batch (a drop-in change)."""

    effective_batch: StrictInt
    same_as_recommendation: StrictBool
    is_baseline: StrictBool
    forced: StrictBool = Field(description="The search held the effective batch.")
    config: Knobs
    metrics: MeasuredMetrics
    speedup: Number | None
    exports: Omittable[Exports] = Field(None, description="The drop-in answer's exports.")
    global_effective_batch: Omittable[StrictInt] = Field(
        None,
        description="Samples per optimizer step over every rank of the launch: the effective "
        "batch (per rank) times the ranks; present with several ranks.",
    )


class BatchChange(_Section):
    """How the recommendation changes the effective batch, and the learning-rate advice."""

    effective_batch: StrictInt
    baseline_effective_batch: StrictInt
    ratio: Number
    optimizer: StrictStr | None
    learning_rate_advice: StrictStr


class Spread(_Section):
    """The lowest and highest of the per-round ratios recommendation / baseline."""

    min: Number
    max: Number


class RunSpread(_Section):
    """The configuration whose confirmation runs lie furthest apart."""

    config: Knobs
    min: Number
    max: Number
    ratio: Number
    unsteady: StrictBool = Field(description="The machine's own speed moved while the job ran.")


class ConfirmationRounds(_Section):
    """The rounds the confirmation ran of the most it could, and why it ran fewer or more."""

    run: StrictInt
    planned: StrictInt
    decided_early: StrictStr | None = None
    added: StrictStr | None = None


class TieBreak(_Section):
    """The extra paired rounds of a winner that did not beat the baseline every round."""

    config: Knobs
    added_rounds: StrictInt
    paired_rounds: StrictInt
    faster_rounds: StrictInt
    kept: StrictBool


class Trials(_Section):
    """The job's trials by outcome, and how its search ended."""

    total: StrictInt
    ok: StrictInt
    failed: StrictInt
    pruned: Omittable[StrictInt] = None
    confirm: Omittable[StrictInt] = None
    skipped_infeasible: Omittable[StrictInt] = None
    skipped_predicted_slow: Omittable[StrictInt] = None
    search_budget: Omittable[StrictInt] = None
    search_ended: Omittable[StrictStr] = None
    by_outcome: Omittable[dict[str, StrictInt]] = None


class Launch(_Section):
    """How to start the ranks the recommendation was tuned for, per launcher."""

    torchrun: StrictStr = Field(description="The command line, for your training script.")
    lightning_trainer: Kwargs = Field(description="Trainer's ``devices`` and ``strategy``.")
    accelerate: Kwargs = Field(description="``accelerate launch``'s ``num_processes``.")


class Distributed(_Section):
    """The ranks each trial ran as on one host, and how many ranks share the host."""

    nproc_per_node: StrictInt = Field(description="DDP ranks each trial ran as.")
    backend: StrictStr = Field(description="``nccl`` on CUDA, ``gloo`` on a CPU.")
    host_share: StrictInt = Field(
        description="Ranks of the launch sharing the host: each was tuned with this share of "
        "its cores and memory (batch size and workers are per rank)."
    )


class Exports(_Section):
    """The recommendation as keyword arguments for the places users set these knobs."""

    dataloader: Kwargs
    lightning_trainer: Kwargs
    hf_training_arguments: Kwargs
    accelerate: Omittable[Kwargs] = Field(None, description="For Accelerate's Accelerator.")
    set_by_hand: Omittable[dict[str, dict[str, StrictStr]]] = Field(
        None,
        description="Per framework section, the knobs its arguments cannot express and how "
        "to set each; present when there are any.",
    )
    torch_compile: Omittable[Kwargs] = Field(None, description="Present when it compiles.")
    optimizer: Omittable[Kwargs] = Field(
        None,
        description="Arguments to add to the optimizer's constructor (fused=True or "
        "foreach=True); present when its implementation is chosen.",
    )
    environment: Omittable[dict[str, StrictStr]] = Field(
        None, description="Variables to set before Python starts; present when there are any."
    )
    launch: Omittable[Launch] = Field(
        None, description="How to start the ranks; present when tuned for several."
    )


class LeftRace(_Section):
    """When a candidate left the confirmation race, and why."""

    after_round: StrictInt | None
    because: StrictStr | None


class Candidate(_Section):
    """A configuration the confirmation re-measured."""

    config: Knobs
    metrics: MeasuredMetrics
    usable: StrictBool
    left_race: LeftRace | None = Field(None, description="Null when it ran every round.")


class ProfileSection(_Section):
    """The step alone per batch and precision, the loader alone per worker count, and the
    memory model: the bounds the search was seeded from. The profile writes the section
    (``Profile.public_dict``), and the keys named here are its tables; it has more."""

    step: Omittable[list[dict[str, Any]]] = None
    step_threads: Omittable[list[dict[str, Any]]] = None
    loader: Omittable[list[dict[str, Any]]] = None
    memory: Omittable[list[dict[str, Any]]] = None


class RecommendationDocument(_Section):
    """What a tuning job found, with its evidence: the document ``autotune run --out``
    writes and ``GET /v1/jobs/{id}/recommendation`` answers."""

    document_schema: SchemaVersion = Field(alias="schema")
    workload: StrictStr
    device: Device
    config: Knobs
    metrics: Metrics
    baseline: Baseline
    speedup: Number | None = Field(
        description="Over the run, compile time charged; null when the baseline failed."
    )
    run: RunLength | None = None
    same_effective_batch: Omittable[SameEffectiveBatch] = None
    batch_change: BatchChange | None = Field(None, description="Null when the batch is kept.")
    speedup_spread: Spread | None = None
    run_spread: RunSpread | None = None
    within_noise: Omittable[StrictBool] = None
    confirmation_rounds: Omittable[ConfirmationRounds] = None
    tie_break: TieBreak | None = None
    verdict: Omittable[StrictStr] = None
    trials: Trials
    diagnosis: StrictStr
    exports: Exports
    candidates: Omittable[list[Candidate]] = None
    memory_budget_bytes: StrictInt | None = None
    search_space: Omittable[dict[str, Any]] = None
    profile: ProfileSection | None = None
    distributed: Omittable[Distributed] = Field(
        None, description="The ranks and host share it was tuned for; absent before ranks."
    )
    fingerprint: dict[str, Any] | None = None
    job_id: Omittable[StrictInt] = None
    created_at: Omittable[StrictStr] = Field(None, json_schema_extra={"format": "date-time"})


def recommendation_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of :class:`RecommendationDocument`, named by its
    version (``urn:autotune:recommendation:v1``); the package ships it as
    ``recommendation.schema.json``."""
    return copy.deepcopy(_json_schema())


@cache
def _json_schema() -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:" + SCHEMA.replace(".", ":").replace("/", ":"),
        **RecommendationDocument.model_json_schema(),
        "title": SCHEMA,
    }
