"""The options of one tuning job: the same object behind ``autotune run`` and ``POST /v1/jobs``."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from autotune.errors import ConfigError
from autotune.measure import MeasurePlan
from autotune.space import (
    Config,
    check_knob_settings,
    coerce_knob_value,
    has_control_character,
)

#: A size once stripped: a number, then a unit. Matched only against short text and without
#: nested or adjacent repetition, so the work is linear in the text.
_SIZE = re.compile(r"(\d{1,20}(?:\.\d{1,20})?) {0,4}([kmgt]i?b?|b|%)?", re.IGNORECASE | re.ASCII)
#: The longest size written as text ("512 MiB", "80%", a byte count): longer is refused unread.
_MAX_SIZE_TEXT = 48
#: The largest memory budget, 1 PiB: beyond any one device's memory.
MAX_MEMORY_BYTES = 2**50
_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "ki": 2**10,
    "kib": 2**10,
    "m": 10**6,
    "mb": 10**6,
    "mi": 2**20,
    "mib": 2**20,
    "g": 10**9,
    "gb": 10**9,
    "gi": 2**30,
    "gib": 2**30,
    "t": 10**12,
    "tb": 10**12,
    "ti": 2**40,
    "tib": 2**40,
}

_PLAN = MeasurePlan()

#: A confirmation run's window lasts this many times a search trial's seconds, unless set: the
#: search screens many configurations on short windows, the confirmation decides on longer
#: ones. Two, not three: the spread of a paired ratio (candidate / baseline, measured one after
#: the other) did not shrink with longer windows, since what a longer window would average away
#: is smaller than the machine's drift between the two runs (evidence: ``benchmarks/log/``).
CONFIRM_WINDOW_FACTOR = 2
#: ``cuda: MODEL`` or ``cpu: MODEL, N cores``, as workers report their device class.
_DEVICE_CLASS = re.compile(r"^(cuda: \S.*|cpu: \S.*, \d+ cores)$")

MAX_TRIALS = 1000
#: The most ranks one host runs (``--nproc-per-node``, ``--host-share``).
MAX_RANKS = 64
MAX_TRIAL_TIMEOUT_S = 3600.0
MAX_TIME_BUDGET_S = 7 * 24 * 3600.0
#: Seconds a trial that compiles may take beyond ``trial_timeout_s`` by default: inductor's
#: max-autotune on a large model takes minutes.
DEFAULT_COMPILE_TIMEOUT_S = 900.0
#: Measurements in a row without a gain above the noise after which the search has converged.
#: Six: after the queued configurations, TPE's next proposals lie around the best; six that
#: gain nothing mean the budget's rest would mostly re-measure the noise around it.
DEFAULT_PATIENCE = 6


def parse_memory(value: str | int, device_total_bytes: int) -> int:
    """Bytes from ``"8GB"``, ``"512MiB"``, ``"80%"`` (of the device) or a plain byte count.

    At most :data:`MAX_MEMORY_BYTES`. Text is stripped and refused past a few dozen
    characters before it is matched, so a hostile value costs no more than a short one.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return _memory_in_range(value, value)
    text = str(value).strip()
    match = _SIZE.fullmatch(text) if len(text) <= _MAX_SIZE_TEXT else None
    if match is None:
        raise ConfigError(
            f"--max-memory {_quoted(value)} is not a size; write bytes, 8GB, 512MiB or 80%"
        )
    number, unit = float(match.group(1)), (match.group(2) or "").lower()
    if unit == "%":
        if not 0 < number <= 100:
            raise ConfigError(f"--max-memory {value!r}: a percentage must be in (0, 100]")
        return int(device_total_bytes * number / 100)
    return _memory_in_range(int(number * _UNITS[unit]), value)


def _memory_in_range(size: int, value: str | int) -> int:
    if size <= 0:
        raise ConfigError(f"--max-memory {_quoted(value)} must be positive; e.g. 8GB or 80%")
    if size > MAX_MEMORY_BYTES:
        raise ConfigError(
            f"--max-memory {_quoted(value)} is more than 1 PiB (2**50 bytes); give one "
            "device's budget, e.g. 8GB or 80%"
        )
    return size


def _quoted(value: str | int) -> str:
    """``value`` as a memory error names it: as written, unless it is too long to read."""
    if isinstance(value, int):
        digits = int(value.bit_length() * math.log10(2)) + 1
        return str(value) if digits <= 24 else f"of about {digits} digits"
    return repr(value) if len(value) <= _MAX_SIZE_TEXT else f"of {len(value)} characters"


def format_mib(size: int) -> str:
    """``size`` bytes in MiB, as an error about the memory budget states it."""
    return f"{size / 2**20:.0f} MiB"


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
    #: Best candidates re-measured against the baseline before recommending (of twins among
    #: them, the faster measured only: see ``autotune.recommend.pick_candidates``).
    confirm_top: int = Field(default=3, ge=1, le=10)
    confirm_rounds: int = Field(default=3, ge=1, le=10)
    #: Shortest timed window of a confirmation run; None: CONFIRM_WINDOW_FACTOR x min_seconds.
    confirm_seconds: float | None = Field(default=None, ge=0, le=3600)
    prune: bool = True
    #: End the search before ``n_trials`` once every queued configuration is measured and
    #: this many measurements in a row improved on the best by no more than 2%; 0: never.
    patience: int = Field(default=DEFAULT_PATIENCE, ge=0, le=MAX_TRIALS)
    #: The length of the run the recommendation is for, which torch.compile's time is charged
    #: against: epochs of the dataset (one when neither is given), or optimizer steps at the
    #: baseline's batch (the same samples whichever batch size a configuration uses).
    epochs: int | None = Field(default=None, ge=1, le=1_000_000)
    steps: int | None = Field(default=None, ge=1, le=10**12)
    #: Seconds a trial that compiles may take beyond ``trial_timeout_s``.
    compile_timeout_s: float = Field(
        default=DEFAULT_COMPILE_TIMEOUT_S, gt=0, le=MAX_TRIAL_TIMEOUT_S
    )
    #: The device class the job must run on (``cuda: <GPU name>``, ``cpu: <CPU name>, 16
    #: cores``, as ``GET /v1/devices`` lists them); None: the first device that runs it.
    device_class: str | None = Field(default=None, max_length=512)
    #: A job resumed or taken over where the hardware or software differs from what it measured
    #: so far: ``fresh`` measures anew in a new measurement set (the old trials are kept and
    #: never ranked with the new), ``refuse`` fails it. ``fresh`` by default: either way no
    #: ranking mixes hardware, and a fleet's worker that takes a job over is rarely the user's
    #: choice, so failing would only cost them the job.
    on_new_hardware: Literal["fresh", "refuse"] = "fresh"
    #: Profile the step alone and the loader alone first, predict every configuration, and
    #: seed the search with the predicted best and the least known; False: the plain search.
    profile: bool = True
    #: Seconds the profile may spend measuring, half on the step and half on the loader.
    profile_seconds: float = Field(default=40.0, ge=2, le=600)
    #: Ranks of the DDP job each trial runs as on this host (``torchrun --nproc-per-node``):
    #: one GPU each on CUDA, gloo on a CPU; batch_size and num_workers are per rank.
    nproc_per_node: int = Field(default=1, ge=1, le=MAX_RANKS)
    #: Ranks the user's launch will run on this host, sharing its cores and memory; None: as
    #: many as ``nproc_per_node``. Above it, each trial gets that share of the host.
    host_share: int | None = Field(default=None, ge=1, le=MAX_RANKS)

    def measure_plan(self) -> MeasurePlan:
        """The measurement window of a search trial: short, to screen many configurations."""
        return MeasurePlan(self.warmup_steps, self.min_steps, self.min_seconds, seed=self.seed)

    def confirm_plan(self) -> MeasurePlan:
        """The longer window of a confirmation run, which decides between the candidates.

        Longer in time, not in steps: ``confirm_seconds`` (by default
        ``CONFIRM_WINDOW_FACTOR`` times the search's seconds) and the search's ``min_steps``.
        Time is what averages out a machine's drift; a step count a multiple of the search's
        would make each confirmation run of a slow step last many times its window.
        """
        seconds = self.confirm_seconds
        if seconds is None:
            seconds = CONFIRM_WINDOW_FACTOR * self.min_seconds
        return MeasurePlan(self.warmup_steps, self.min_steps, seconds, seed=self.seed)

    def trial_timeout_for(self, config: Config) -> float:
        """Seconds a trial of ``config`` may take: compiling adds ``compile_timeout_s``."""
        extra = self.compile_timeout_s if config.compile != "off" else 0.0
        return self.trial_timeout_s + extra

    def run_samples(self, dataset_length: int | None, baseline: Config) -> int | None:
        """Samples in the user's run: ``steps`` optimizer steps of the baseline's batch, else
        ``epochs`` (default one) of the dataset; None when the dataset has no length and no
        ``steps`` are given."""
        if self.steps is not None:
            return self.steps * baseline.batch_size * baseline.grad_accum_steps
        if dataset_length is None:
            return None
        return (self.epochs or 1) * dataset_length

    def memory_budget_bytes(self, device_memory_bytes: int) -> int | None:
        """The memory budget in bytes on a device of that size, or None without one."""
        if self.max_memory is None:
            return None
        return parse_memory(self.max_memory, device_memory_bytes)

    @field_validator("*", mode="before")
    @classmethod
    def _finite_and_plain(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(
                f"{info.field_name} is {value}, not a finite number; give a plain number"
            )
        if isinstance(value, str) and has_control_character(value):
            raise ValueError(
                f"{info.field_name} holds a control character (a NUL byte, a newline, an "
                "escape); write it as plain text"
            )
        return value

    @field_validator("fixed", "baseline")
    @classmethod
    def _knob_values(cls, values: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        try:
            for name, value in values.items():
                coerce_knob_value(name, value, str(info.field_name))
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return values

    @field_validator("ranges")
    @classmethod
    def _knob_ranges(cls, ranges: dict[str, Any]) -> dict[str, Any]:
        try:
            check_knob_settings({}, ranges, {})
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return ranges

    @field_validator("max_memory", mode="before")
    @classmethod
    def _memory_is_text_or_bytes(cls, value: Any) -> Any:
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError(
                    f"max_memory {value:g} is not a whole number of bytes; write bytes, 8GB, "
                    "512MiB or 80%"
                )
            return int(value)
        return value

    @field_validator("max_memory")
    @classmethod
    def _memory_parses(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            try:
                parse_memory(value, 1)
            except ConfigError as exc:
                raise ValueError(str(exc).replace("--max-memory ", "max_memory ", 1)) from None
        return value

    @field_validator("confirm_seconds")
    @classmethod
    def _confirm_not_shorter(cls, value: float | None, info: ValidationInfo) -> float | None:
        search = info.data.get("min_seconds")
        if value is not None and search is not None and value < search:
            raise ValueError(
                f"the confirmation window ({value:g} s) is shorter than the search's "
                f"(min_seconds {search:g} s); confirmation decides, so give it at least as long"
            )
        return value

    @field_validator("device_class")
    @classmethod
    def _device_class_form(cls, value: str | None) -> str | None:
        if value is not None and not _DEVICE_CLASS.match(value):
            raise ValueError(
                f"device class {value!r} is not 'cuda: MODEL' or 'cpu: MODEL, N cores'; copy "
                "one from GET /v1/devices"
            )
        return value

    @property
    def ranks_sharing_host(self) -> int:
        """The ranks the host is divided among: ``host_share``, else ``nproc_per_node``."""
        return self.host_share or self.nproc_per_node

    @model_validator(mode="after")
    def _share_holds_the_ranks(self) -> TuneOptions:
        if self.host_share is not None and self.host_share < self.nproc_per_node:
            raise ValueError(
                f"host share {self.host_share} is below nproc_per_node {self.nproc_per_node}: the "
                "ranks measured share the host too; give a host share of at least the ranks"
            )
        return self

    @model_validator(mode="after")
    def _one_run_length(self) -> TuneOptions:
        if self.epochs is not None and self.steps is not None:
            raise ValueError("give the run's length as epochs or as steps, not both")
        return self

    @model_validator(mode="after")
    def _device_fits_class(self) -> TuneOptions:
        kind = self.device_class.split(":", 1)[0] if self.device_class else None
        if kind is not None and self.device != "auto" and not self.device.startswith(kind):
            raise ValueError(
                f"device {self.device!r} cannot run a job for device class "
                f"{self.device_class!r}; use device auto or {kind}"
            )
        return self

    @field_validator("effective_batch")
    @classmethod
    def _effective_multiple_of_8(cls, value: int | None) -> int | None:
        if value is not None and value % 8:
            raise ValueError(f"effective batch {value} is not a multiple of 8")
        return value
