"""Every error a user can hit, in one place.

Each message is one sentence that says what is wrong and how to fix it; the CLI prints it
without a traceback (unless ``--debug``) and the API turns it into a 4xx.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import ValidationError


class AutotuneError(Exception):
    """Base class of every error autotune raises on purpose."""


class WorkloadError(AutotuneError):
    """The workload could not be found, imported or built as the contract requires."""


class ConfigError(AutotuneError):
    """A knob, range, budget or option given by the user is not valid."""


class StoreError(AutotuneError):
    """The database could not be opened or does not hold what was asked for."""


class SchemaOutdatedError(StoreError):
    """The database's schema is older (or newer) than this autotune; ``autotune db upgrade``."""


class LeaseLostError(StoreError):
    """The job was taken over by another worker; this one must stop writing to it."""


class JobNotFoundError(StoreError):
    """No job has the id that was asked for."""


class JobStateError(StoreError):
    """The job exists but is not in a state that allows what was asked."""


class ServiceError(AutotuneError):
    """The server could not be reached or refused the request; the message says why."""


class NoFeasibleConfigError(AutotuneError):
    """No measured configuration is usable (all failed or exceeded the memory budget)."""


def validation_error_parts(error: Mapping[str, Any], skip: int = 0) -> tuple[str, str]:
    """Where one pydantic error is (a dotted path, "" at the top, ``skip`` leading parts left
    out) and its message without pydantic's "Value error, " prefix: the pieces every face turns
    into its own one-sentence error."""
    where = ".".join(str(part) for part in list(error.get("loc", ()))[skip:])
    return where, str(error.get("msg", "")).removeprefix("Value error, ")


def first_validation_error(exc: ValidationError) -> tuple[str, str]:
    """:func:`validation_error_parts` of the first error of ``exc``."""
    return validation_error_parts(exc.errors()[0])
