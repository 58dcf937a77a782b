"""The options of one tuning job: the same object behind ``autotune run`` and ``POST /v1/jobs``."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from autotune.errors import ConfigError
from autotune.measure import MeasurePlan

_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b|%)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "ki": 2**10, "kib": 2**10,
    "m": 10**6, "mb": 10**6, "mi": 2**20, "mib": 2**20,
    "g": 10**9, "gb": 10**9, "gi": 2**30, "gib": 2**30,
    "t": 10**12, "tb": 10**12, "ti": 2**40, "tib": 2**40,
}

_PLAN = MeasurePlan()

MAX_TRIALS = 1000
MAX_TRIAL_TIMEOUT_S = 3600.0
MAX_TIME_BUDGET_S = 7 * 24 * 3600.0


def parse_memory(value: str | int, device_total_bytes: int) -> int:
    """Bytes from ``"8GB"``, ``"512MiB"``, ``"80%"`` (of the device) or a plain byte count."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ConfigError(f"--max-memory {value} must be positive; e.g. 8GB or 80%")
        return value
    match = _MEMORY.match(str(value))
    if match is None:
        raise ConfigError(
            f"--max-memory {value!r} is not a size; write bytes, 8GB, 512MiB or 80%"
        )
    number, unit = float(match.group(1)), (match.group(2) or "").lower()
    if unit == "%":
        if not 0 < number <= 100:
            raise ConfigError(f"--max-memory {value!r}: a percentage must be in (0, 100]")
        return int(device_total_bytes * number / 100)
    size = int(number * _UNITS[unit])
    if size <= 0:
        raise ConfigError(f"--max-memory {value!r} must be positive; e.g. 8GB or 80%")
    return size


class TuneOptions(BaseModel):
    """Everything a tuning job needs; unknown fields are refused so a typo cannot pass silently.

    Example:
        >>> TuneOptions(workload="builtin:image-cnn", n_trials=10).trial_timeout_s
        180.0
    """

    model_config = ConfigDict(extra="forbid")

    workload: str = Field(min_length=1, max_length=1024)
    n_trials: int = Field(default=20, ge=1, le=MAX_TRIALS)
    time_budget_s: float | None = Field(default=None, gt=0, le=MAX_TIME_BUDGET_S)
    trial_timeout_s: float = Field(default=180.0, gt=0, le=MAX_TRIAL_TIMEOUT_S)
    #: Memory budget: bytes, "8GB", "512MiB" or "80%" of the device's memory.
    max_memory: str | int | None = None
    fixed: dict[str, Any] = Field(default_factory=dict)
    ranges: dict[str, Any] = Field(default_factory=dict)
    #: The user's current configuration (defaults: PyTorch's, the workload's batch size).
    baseline: dict[str, Any] = Field(default_factory=dict)
    effective_batch: int | None = Field(default=None, ge=8, le=1 << 20)
    device: str = Field(default="auto", max_length=32)
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    warmup_steps: int = Field(default=_PLAN.warmup_steps, ge=1, le=10_000)
    min_steps: int = Field(default=_PLAN.min_steps, ge=1, le=100_000)
    min_seconds: float = Field(default=_PLAN.min_seconds, ge=0, le=3600)
    #: Best candidates re-measured against the baseline before recommending.
    confirm_top: int = Field(default=3, ge=1, le=10)
    confirm_rounds: int = Field(default=3, ge=1, le=10)
    prune: bool = True

    def measure_plan(self) -> MeasurePlan:
        """The measurement window these options ask for."""
        return MeasurePlan(self.warmup_steps, self.min_steps, self.min_seconds, seed=self.seed)

    def memory_budget_bytes(self, device_memory_bytes: int) -> int | None:
        """The memory budget in bytes on a device of that size, or None without one."""
        if self.max_memory is None:
            return None
        return parse_memory(self.max_memory, device_memory_bytes)

    @field_validator("max_memory")
    @classmethod
    def _memory_parses(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            try:
                parse_memory(value, 1)
            except ConfigError as exc:
                raise ValueError(str(exc).removeprefix("--max-memory ")) from None
        return value

    @field_validator("effective_batch")
    @classmethod
    def _effective_multiple_of_8(cls, value: int | None) -> int | None:
        if value is not None and value % 8:
            raise ValueError(f"effective batch {value} is not a multiple of 8")
        return value
