"""The recommendation document's schema, checked by hand so reading it needs no extra dependency.

A document is valid when every required key is present with the right JSON type; keys the
schema does not name are allowed, so later versions can add fields without breaking readers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from autotune.errors import ConfigError, first_validation_error
from autotune.space import Config

SCHEMA = "autotune.recommendation/v1"

_DICT = "an object"
_STR = "a string"
_INT = "an integer"
_NUMBER = "a number"
_INT_OR_NULL = "an integer or null"
_NUMBER_OR_NULL = "a number or null"
_DICT_OR_NULL = "an object or null"
_LIST = "a list"

_METRICS = {
    "samples_per_s": _NUMBER,
    "step_time_ms": _NUMBER,
    "peak_memory_bytes": _INT_OR_NULL,  # null on CPU, where there is no device allocator
    "peak_host_memory_bytes": _INT_OR_NULL,
    "data_wait_fraction": _NUMBER,
}
# The baseline may have failed (ran out of memory, say): then its metrics are null.
_BASELINE_METRICS = dict.fromkeys(_METRICS, _NUMBER_OR_NULL)

#: Every required key, as a dotted path, and what its value must be; parents come first.
REQUIRED: dict[str, str] = {
    "schema": _STR,
    "workload": _STR,
    "device": _DICT,
    "device.type": _STR,
    "device.name": _STR,
    "device.memory_bytes": _INT,
    "config": _DICT,
    "metrics": _DICT,
    **{f"metrics.{name}": kind for name, kind in _METRICS.items()},
    "baseline": _DICT,
    "baseline.config": _DICT,
    "baseline.metrics": _DICT,
    **{f"baseline.metrics.{name}": kind for name, kind in _BASELINE_METRICS.items()},
    # Null when the baseline itself failed, so there is nothing to compare with.
    "speedup": _NUMBER_OR_NULL,
    "trials": _DICT,
    "trials.total": _INT,
    "trials.ok": _INT,
    "trials.failed": _INT,
    "diagnosis": _STR,
    "exports": _DICT,
    "exports.dataloader": _DICT,
    "exports.lightning_trainer": _DICT,
    "exports.hf_training_arguments": _DICT,
}

#: Keys a document may lack (older documents, a job run without a profile), checked when present.
OPTIONAL: dict[str, str] = {
    "profile": _DICT_OR_NULL,
    "profile.step": _LIST,
    "profile.step_threads": _LIST,
    "profile.loader": _LIST,
    "profile.memory": _LIST,
    "confirmation_rounds": _DICT,
    "trials.search_budget": _INT,
    "trials.search_ended": _STR,
    "exports.environment": _DICT,
}

_MISSING = object()

#: Knobs a v1 document written before they existed lacks, and the value it was measured with.
KNOBS_ADDED_LATER: dict[str, Any] = {
    "compile": "off",
    "retain_freed_memory": False,
    "intra_op_threads": None,
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_CHECKS: dict[str, Callable[[Any], bool]] = {
    _DICT: lambda value: isinstance(value, dict),
    _STR: lambda value: isinstance(value, str),
    _INT: _is_int,
    _NUMBER: _is_number,
    _INT_OR_NULL: lambda value: value is None or _is_int(value),
    _NUMBER_OR_NULL: lambda value: value is None or _is_number(value),
    _DICT_OR_NULL: lambda value: value is None or isinstance(value, dict),
    _LIST: lambda value: isinstance(value, list),
}


def _lookup(doc: dict[str, Any], path: str) -> Any:
    value: Any = doc
    for part in path.split("."):
        if not isinstance(value, dict):
            return _MISSING
        value = value.get(part, _MISSING)
        if value is _MISSING:
            return _MISSING
    return value


def read_config(section: Any, where: str) -> Config:
    """The :class:`Config` stored under ``where`` (``"config"``, ``"baseline.config"``).

    Every knob must be present, except those added since v1 documents were first written
    (:data:`KNOBS_ADDED_LATER`), which take their default; keys that are not knobs are ignored,
    as elsewhere in the document.
    """
    if not isinstance(section, dict):
        raise ConfigError(
            f"the recommendation's {where!r} must be an object of knob values; "
            "regenerate the file with autotune"
        )
    section = {**KNOBS_ADDED_LATER, **section}
    missing = [name for name in Config.model_fields if name not in section]
    if missing:
        raise ConfigError(
            f"the recommendation's {where!r} lacks the knob(s) "
            f"{', '.join(missing)}; regenerate the file with autotune"
        )
    try:
        return Config.model_validate({name: section[name] for name in Config.model_fields})
    except ValidationError as error:
        knob, message = first_validation_error(error)
        raise ConfigError(
            f"the recommendation's {where}.{knob} is invalid ({message}); "
            "regenerate the file with autotune"
        ) from None


def validate_recommendation(doc: Any) -> None:
    """Raise :class:`ConfigError` unless ``doc`` is a valid ``autotune.recommendation/v1``.

    The schema string is checked first, so a file of another kind gets that message rather
    than one about a missing key.
    """
    if not isinstance(doc, dict):
        raise ConfigError(
            f"a recommendation must be a JSON object, not {type(doc).__name__}; "
            "pass a recommendation file written by autotune"
        )
    schema = doc.get("schema", _MISSING)
    if schema is not _MISSING and schema != SCHEMA:
        raise ConfigError(
            f"the document's schema is {schema!r}, not {SCHEMA!r}; "
            "pass a recommendation file written by autotune"
        )
    for path, kind in (*REQUIRED.items(), *OPTIONAL.items()):
        value = _lookup(doc, path)
        if value is _MISSING and path in OPTIONAL:
            continue
        if value is _MISSING:
            raise ConfigError(
                f"the recommendation lacks the required key {path!r}; "
                "regenerate the file with autotune"
            )
        if not _CHECKS[kind](value):
            raise ConfigError(
                f"the recommendation's {path!r} must be {kind}, not "
                f"{type(value).__name__} {value!r:.40}; "
                "regenerate the file with autotune"
            )
    read_config(doc["config"], "config")
    read_config(doc["baseline"]["config"], "baseline.config")
