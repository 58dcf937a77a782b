"""Reading a recommendation document: its schema checked against
:class:`~autotune.recommend._document_model.RecommendationDocument`, and its configurations.

A document is valid when every required key is present with the right JSON type; keys the
models do not name are allowed, so later versions can add fields without breaking readers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from autotune.errors import ConfigError, first_validation_error
from autotune.recommend._document_model import (
    KNOBS_ADDED_LATER,
    SCHEMA,
    RecommendationDocument,
    recommendation_json_schema,
)
from autotune.space import Config

_MISSING = object()
#: How a message names each JSON type.
_KINDS = {
    "object": "an object",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "array": "a list",
}


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
    try:
        RecommendationDocument.model_validate(doc)
    except ValidationError as error:
        raise ConfigError(_sentence(doc, error.errors()[0])) from None
    read_config(doc["config"], "config")
    read_config(doc["baseline"]["config"], "baseline.config")


def _sentence(doc: dict[str, Any], error: Any) -> str:
    """The first schema error as one sentence naming the key."""
    path = _path_in(doc, error["loc"], missing=error["type"] == "missing")
    dotted = ".".join(str(part) for part in path)
    if error["type"] == "missing":
        return (
            f"the recommendation lacks the required key {dotted!r}; "
            "regenerate the file with autotune"
        )
    value = error["input"]
    return (
        f"the recommendation's {dotted!r} must be {_expected(path)}, not "
        f"{type(value).__name__} {value!r:.40}; regenerate the file with autotune"
    )


def _path_in(doc: Any, loc: Sequence[str | int], *, missing: bool) -> list[str | int]:
    """The keys of ``loc`` that the document has (and a missing one, last), leaving out the
    names pydantic gives a union's members (``int``, ``float``)."""
    path: list[str | int] = []
    value = doc
    for index, part in enumerate(loc):
        if _has(value, part):
            value = value[part]
        elif not (missing and index == len(loc) - 1):
            continue
        path.append(part)
    return path


def _has(value: Any, part: str | int) -> bool:
    if isinstance(value, list):
        return isinstance(part, int) and 0 <= part < len(value)
    return isinstance(value, dict) and part in value


def _expected(path: Sequence[str | int]) -> str:
    """What the schema wants at ``path``, as a message says it: ``a number or null``."""
    schema = _schema_at(path)
    options = schema.get("anyOf", [schema])
    types = [option.get("type", "object") for option in options]
    kinds = [_KINDS.get(kind, kind) for kind in types if kind != "null"]
    return " or ".join(kinds + ["null"] * ("null" in types))


def _schema_at(path: Sequence[str | int]) -> dict[str, Any]:
    """The part of the document's JSON Schema that describes the value at ``path``."""
    root = recommendation_json_schema()
    node = root
    for part in path:
        node = _resolved(root, node)
        if isinstance(part, int):
            node = node.get("items", {})
            continue
        extra = node.get("additionalProperties")
        node = node.get("properties", {}).get(part, extra if isinstance(extra, dict) else {})
    return node


def _resolved(root: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """``node`` itself, or the definition it refers to, through a nullable ``anyOf``."""
    present = [option for option in node.get("anyOf", [node]) if option.get("type") != "null"]
    if len(present) == 1:
        node = present[0]
    ref = node.get("$ref")
    return root["$defs"][ref.rsplit("/", 1)[-1]] if isinstance(ref, str) else node
