"""The search space of one job: which knobs are searched, fixed or not applicable, and how."""

from __future__ import annotations

import itertools
import math
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from autotune.errors import ConfigError, first_validation_error
from autotune.space._config import MAX_WORKERS, TORCH_DEFAULT_PREFETCH_FACTOR, Config
from autotune.space._facts import DeviceInfo, WorkloadInfo
from autotune.space._host import max_workers_per_rank, over_host
from autotune.space._knobs import (
    KNOBS,
    amp_modes,
    compile_modes,
    value_unavailable,
)

_TRUE_WORDS = {"true", "yes", "on", "1"}
_FALSE_WORDS = {"false", "no", "off", "0"}
_NULL_WORDS = {"null", "none", "default"}
#: The longest knob value written as text: a word, a number, or a range such as "8..256".
MAX_KNOB_TEXT = 256
#: The longest quote of a sent value in an error message.
_SHOWN_CHARS = 40
#: A batch size is searched only if an epoch holds at least this many batches of it. Seeing an
#: epoch boundary no longer needs it (the measurement starts one and amortises its cost); it
#: stays because warm-up leaves out each epoch's first quarter, and a user with so small a
#: dataset would not train with larger batches either.
MIN_STEPS_PER_EPOCH = 8
_NUMERIC_KNOBS = ("batch_size", "num_workers", "prefetch_factor")
#: Knobs whose values are ordered numbers: searched as an index into their ascending values.
ORDINAL_KNOBS = _NUMERIC_KNOBS


def parse_assignments(items: Iterable[str], option: str) -> dict[str, str]:
    """Split ``["amp=bf16", "num_workers=0..8"]`` into ``{"amp": "bf16", ...}``."""
    result: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise ConfigError(f"{option} {item!r} is not KNOB=VALUE; write e.g. {option} amp=bf16")
        result[name.strip()] = value.strip()
    return result


def has_control_character(text: str) -> bool:
    """Whether ``text`` holds a control character (a NUL byte, a newline, an escape) or half
    of a surrogate pair: no name, path or value autotune takes needs one, and a database may
    refuse to store them."""
    return any(unicodedata.category(char) in ("Cc", "Cs") for char in text)


def _shown(raw: Any) -> str:
    """``raw`` as an error quotes it: short whatever was sent (a list or an object is named,
    a long value cut), so that a message stays one readable sentence."""
    if isinstance(raw, Mapping | list | tuple):
        return "an object" if isinstance(raw, Mapping) else "a list"
    if isinstance(raw, int) and raw.bit_length() > 64:
        return f"a number of about {int(raw.bit_length() * math.log10(2)) + 1} digits"
    text = repr(raw)
    return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]}... ({len(text)} chars)"


def _check_knob_name(name: str, option: str) -> None:
    if name not in KNOBS:
        known = ", ".join(KNOBS)
        raise ConfigError(f"{option}: unknown knob {_shown(name)}; known knobs are: {known}")


def _check_text(name: str, raw: str, option: str) -> None:
    """A knob's value written as text: a short word or number without control characters."""
    if len(raw) > MAX_KNOB_TEXT:
        raise ConfigError(
            f"{option} {name}: a value of {len(raw)} characters is too long; knob values are "
            f"words or numbers of at most {MAX_KNOB_TEXT} characters"
        )
    if has_control_character(raw):
        raise ConfigError(
            f"{option} {name}={_shown(raw)} holds a control character; write the value as "
            "plain text"
        )


def _is_null(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value in _NULL_WORDS)


def _whole_number(value: Any) -> int | None:
    """``value`` as an integer if it is a whole number (an int, a finite integral float, or
    such digits as text), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _is_sane_int(value: Any) -> bool:
    """An int (not a flag) of at most 64 bits: larger ones are no knob's value, and only
    waste time in printing and comparing."""
    return isinstance(value, int) and not isinstance(value, bool) and value.bit_length() <= 64


def coerce_knob_value(name: str, raw: Any, option: str = "--fix") -> Any:
    """Turn a CLI string or JSON value into a valid value of knob ``name``."""
    _check_knob_name(name, option)
    knob = KNOBS[name]
    if isinstance(raw, str):
        _check_text(name, raw, option)
    value = raw.strip().lower() if isinstance(raw, str) else raw
    if name == "tf32" and _is_null(value):
        return None
    if knob.is_flag:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value in _TRUE_WORDS | _FALSE_WORDS:
            return value in _TRUE_WORDS
        extra = ", or null for PyTorch's default" if name == "tf32" else ""
        raise ConfigError(f"{option} {name}={_shown(raw)}: {name} takes true or false{extra}")
    if all(isinstance(v, str) for v in knob.values):  # amp, compile
        if value in knob.values:
            return value
        raise ConfigError(
            f"{option} {name}={_shown(raw)}: {name} takes one of {', '.join(knob.values)}"
        )
    if name in ("prefetch_factor", "intra_op_threads") and _is_null(value):
        return None
    number = _whole_number(value)
    if number is None:
        raise ConfigError(f"{option} {name}={_shown(raw)}: {name} takes a whole number")
    if not _is_sane_int(number):
        raise ConfigError(
            f"{option} {name}={_shown(raw)}: far out of range for {name}; use a whole number "
            "such as 64"
        )
    try:
        Config.model_validate({name: number})
    except ValidationError as exc:
        _, message = first_validation_error(exc)
        raise ConfigError(f"{option} {name}={_shown(raw)}: {message}") from None
    return number


def _values_asked(
    name: str, fixed: Mapping[str, Any], ranges: Mapping[str, tuple[Any, ...] | _Interval]
) -> tuple[Any, ...]:
    """The values of knob ``name`` the user named with ``--fix`` or a listed ``--range``."""
    if name in fixed:
        return (fixed[name],)
    wanted = ranges.get(name, ())
    return () if isinstance(wanted, _Interval) else wanted


@dataclass(frozen=True)
class _Interval:
    lo: int
    hi: int | None


def _prefetch_setting(value: int | None) -> int:
    """The prefetch factor a DataLoader with workers uses: unset is PyTorch's default."""
    return TORCH_DEFAULT_PREFETCH_FACTOR if value is None else value


def _one_spelling_each(prefetch_factors: Iterable[int | None]) -> tuple[int | None, ...]:
    """The values with unset and PyTorch's 2, one setting, kept once, as first written."""
    kept: dict[int, int | None] = {}
    for value in prefetch_factors:
        kept.setdefault(_prefetch_setting(value), value)
    return tuple(kept.values())


def _parse_range(name: str, raw: Any) -> tuple[Any, ...] | _Interval:
    """A range is ``"lo..hi"`` / ``{"min": lo, "max": hi}`` (numbers) or a list of values."""
    option = "--range"
    _check_knob_name(name, option)
    if isinstance(raw, Mapping):
        unknown = set(raw) - {"min", "max"}
        if unknown:
            keys = ", ".join(_shown(key) for key in sorted(unknown)[:3])
            raise ConfigError(f"range of {name}: unknown keys {keys}; use min and max")
        ends = [raw.get(end, "") for end in ("min", "max")]
        if not all(isinstance(end, str) or _is_sane_int(end) for end in ends):
            raise ConfigError(f"range of {name}: min and max take whole numbers, e.g. 8 and 256")
        raw = f"{ends[0]}..{ends[1]}"
    if isinstance(raw, str):
        _check_text(name, raw, option)
    if isinstance(raw, str) and ".." in raw:
        if name not in _NUMERIC_KNOBS:
            raise ConfigError(
                f"{option} {name}={raw}: a lo..hi range needs a numeric knob; "
                f"list the values instead, e.g. {name}=a,b"
            )
        lo_text, _, hi_text = raw.partition("..")
        lo = _grid_value(name, lo_text, option) if lo_text else 0
        hi = _grid_value(name, hi_text, option) if hi_text else None
        if hi is not None and hi < lo:
            raise ConfigError(f"{option} {name}={raw}: the upper end is below the lower end")
        return _Interval(lo, hi)
    items = (
        raw.split(",") if isinstance(raw, str) else list(raw) if isinstance(raw, list) else [raw]
    )
    return tuple(dict.fromkeys(_grid_value(name, item, option) for item in items))


def _grid_value(name: str, raw: Any, option: str) -> Any:
    """A knob value that may be searched: searched batch sizes are multiples of 8."""
    value = coerce_knob_value(name, raw, option)
    if name == "batch_size" and value % 8:
        below = max(8, value // 8 * 8)
        raise ConfigError(
            f"{option} batch_size={_shown(raw)}: {value} is not a multiple of 8, "
            f"which every searched batch size is; use {below} or {below + 8}"
        )
    return value


class SearchSpace:
    """Knob values a job may try on one device for one workload.

    Knobs that cannot change anything on the device are not searched and are reported in
    :attr:`not_applicable`; fixed knobs (``--fix``) take one value; ranges narrow the rest.
    """

    def __init__(
        self,
        device: DeviceInfo,
        workload: WorkloadInfo,
        fixed: Mapping[str, Any] | None = None,
        ranges: Mapping[str, Any] | None = None,
        effective_batch: int | None = None,
        baseline: Mapping[str, Any] | None = None,
        extra_workers: Iterable[int] = (),
    ) -> None:
        self.device = device
        self.workload = workload
        self.effective_batch = effective_batch
        self.not_applicable: dict[str, str] = {}
        self.choices: dict[str, tuple[Any, ...]] = {}
        fixed_values = {name: coerce_knob_value(name, v) for name, v in (fixed or {}).items()}
        parsed_ranges = {name: _parse_range(name, v) for name, v in (ranges or {}).items()}
        # Worker counts a profile found worth trying beyond the grid; a user's own range or
        # fixed value of num_workers wins over them.
        self.takes_extra_workers = not (
            "num_workers" in parsed_ranges or "num_workers" in fixed_values
        )
        self.extra_workers: tuple[int, ...] = (
            tuple(sorted({w for w in extra_workers if 0 < w <= MAX_WORKERS}))
            if self.takes_extra_workers
            else ()
        )
        self._check_values_asked(fixed_values, parsed_ranges)
        for name, knob in KNOBS.items():
            reason = knob.reason_not_applicable(device, workload)
            if reason is not None:
                self.not_applicable[name] = reason
                asked = _values_asked(name, fixed_values, parsed_ranges)
                for value in asked:
                    if value != knob.default:
                        option = "--fix" if name in fixed_values else "--range"
                        raise ConfigError(f"{option} {name}={value}: {name} {reason}; remove it")
                self.choices[name] = (knob.default,)
                continue
            values = self._default_values(name)
            if name in parsed_ranges:
                values = self._narrow(name, values, parsed_ranges[name])
            if name in fixed_values:
                values = (fixed_values[name],)
                if name == "batch_size" and not self._batch_allowed(values[0]):
                    raise ConfigError(self._batch_refusal(values[0]))
            if not values:
                raise ConfigError(self._no_values_left(name))
            if name == "prefetch_factor":
                values = _one_spelling_each(values)
            self.choices[name] = values
        self._baseline_overrides = {
            name: coerce_knob_value(name, v, "--baseline") for name, v in (baseline or {}).items()
        }

    # -- building the value lists -------------------------------------------------------------

    def _batch_upper_bound(self) -> int:
        """Searched batches stay below 1/MIN_STEPS_PER_EPOCH of a map-style dataset."""
        length = self.workload.dataset_length
        if length is None:
            return 1 << 30
        if length < 8:
            return 0
        return max(8, length // MIN_STEPS_PER_EPOCH // 8 * 8)

    def over_host(self, config: Config) -> str | None:
        """Why ``config``'s workers on every rank sharing the host exceed it (see ``_host``)."""
        return over_host(self.device, config)

    def _default_values(self, name: str) -> tuple[Any, ...]:
        knob = KNOBS[name]
        if name == "batch_size":
            values = tuple(b for b in knob.values if b <= self._batch_upper_bound())
            if self.effective_batch is not None:
                values = self._divisors_of_effective_batch(values)
            return values
        if name == "num_workers":
            bound = max_workers_per_rank(self.device)
            return tuple(sorted({w for w in knob.values if w <= bound} | set(self.extra_workers)))
        if name == "amp":
            return amp_modes(self.device)
        if name == "compile":
            return compile_modes(self.device)
        if name == "optimizer_impl":
            return ("default", *self.workload.optimizer_impls)
        return knob.values

    def _divisors_of_effective_batch(self, candidates: Iterable[int]) -> tuple[int, ...]:
        effective = self.effective_batch
        assert effective is not None
        if effective < 8 or effective % 8:
            raise ConfigError(
                f"--effective-batch {effective} is not a positive multiple of 8; use e.g. "
                f"{max(8, effective // 8 * 8)}"
            )
        extra = {b for b in range(8, effective + 1, 8) if effective % b == 0}
        values = sorted(set(candidates) | extra)
        return tuple(b for b in values if effective % b == 0 and b <= self._batch_upper_bound())

    def _narrow(
        self, name: str, values: tuple[Any, ...], wanted: tuple[Any, ...] | _Interval
    ) -> tuple[Any, ...]:
        if isinstance(wanted, _Interval):
            lo, hi = wanted.lo, wanted.hi if wanted.hi is not None else 1 << 30
            bounds = {v for v in (wanted.lo, wanted.hi) if v is not None and v >= 1}
            if name == "batch_size":
                bounds = {b for b in bounds if self._batch_allowed(b)}
            narrowed = tuple(sorted({v for v in set(values) | bounds if lo <= v <= hi}))
        else:
            narrowed = tuple(
                v
                for v in wanted
                if v in values
                or (name == "batch_size" and self._batch_allowed(v))
                or name in ("num_workers", "prefetch_factor", "intra_op_threads")
            )
        if not narrowed:
            raise ConfigError(
                f"--range {name}: no allowed value left on this device and workload "
                f"(allowed: {', '.join(map(str, values))}); widen the range"
            )
        return narrowed

    def _batch_refusal(self, batch: int) -> str:
        if batch > self._batch_upper_bound():
            return (
                f"--fix batch_size={batch} is larger than the dataset "
                f"({self.workload.dataset_length} samples); use a smaller batch"
            )
        return (
            f"--fix batch_size={batch} does not divide --effective-batch "
            f"{self.effective_batch}; pick a batch size that divides it"
        )

    def _no_values_left(self, name: str) -> str:
        if name == "batch_size":
            return (
                f"no batch size fits: the dataset has {self.workload.dataset_length} "
                "samples, fewer than the smallest batch of 8; give it more samples"
            )
        return f"no value of {name} is left to try; widen its range"

    def _batch_allowed(self, batch: int) -> bool:
        if batch > self._batch_upper_bound():
            return False
        return self.effective_batch is None or self.effective_batch % batch == 0

    def _check_values_asked(
        self, fixed_values: Mapping[str, Any], ranges: Mapping[str, Any]
    ) -> None:
        """A value the user names that this device or workload cannot use is an error, never
        a silent skip: ``--range compile=reduce-overhead`` on a CPU says why."""
        for name in ("compile", "amp", "optimizer_impl"):
            if KNOBS[name].reason_not_applicable(self.device, self.workload) is not None:
                continue
            option = "--fix" if name in fixed_values else "--range"
            for value in _values_asked(name, fixed_values, ranges):
                reason = value_unavailable(name, value, self.device, self.workload)
                if reason is not None:
                    raise ConfigError(f"{option} {name}={value}: {reason}")

    # -- what is searched ---------------------------------------------------------------------

    @property
    def searched(self) -> dict[str, tuple[Any, ...]]:
        """Knobs with more than one value to try."""
        return {name: values for name, values in self.choices.items() if len(values) > 1}

    @property
    def fixed(self) -> dict[str, Any]:
        """Applicable knobs that take a single value."""
        return {
            name: values[0]
            for name, values in self.choices.items()
            if len(values) == 1 and name not in self.not_applicable
        }

    def config_from(self, values: Mapping[str, Any]) -> Config:
        """A normalized :class:`Config` from knob values, filling single-valued knobs."""
        merged = {name: choices[0] for name, choices in self.choices.items()}
        merged.update(values)
        if merged["num_workers"] == 0:
            merged["prefetch_factor"] = None
            merged["persistent_workers"] = False
        if self.effective_batch is not None:
            merged["grad_accum_steps"] = self.effective_batch // merged["batch_size"]
        return Config.model_validate(merged).normalized()

    def adjacent(self, config: Config) -> list[Config]:
        """The configurations next to ``config`` along each searched ordered knob (batch size,
        workers, prefetch): the value just below and just above its own, the rest unchanged.
        Values without effect on it (a prefetch factor without workers) give nothing new."""
        near: dict[str, Config] = {config.key(): config}
        values = {name: getattr(config, name) for name in self.choices}
        for name in ORDINAL_KNOBS:
            choices = self.choices.get(name, ())
            if len(choices) < 2:
                continue
            ordered = sorted(
                choices, key=lambda v: _prefetch_setting(v) if name == "prefetch_factor" else v
            )
            here = self.spelling(name, values[name])
            if here not in ordered:
                continue
            index = ordered.index(here)
            for other in ordered[max(0, index - 1) : index] + ordered[index + 1 : index + 2]:
                neighbour = self.config_from({**values, name: other})
                near.setdefault(neighbour.key(), neighbour)
        return list(near.values())[1:]

    def ordered_values(self, name: str) -> tuple[int, ...] | None:
        """The values of an ordered numeric knob, ascending; None for a knob searched as
        categories (flags, ``amp``, or a list holding ``null``)."""
        values = self.choices[name]
        if name not in ORDINAL_KNOBS or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in values
        ):
            return None
        return tuple(sorted(values))

    def spelling(self, name: str, value: Any) -> Any:
        """``value`` as this space's choices write it: with workers, an unset prefetch_factor
        and PyTorch's 2 are one setting, and the space holds one of the two."""
        if name == "prefetch_factor":
            for choice in self.choices[name]:
                if _prefetch_setting(choice) == _prefetch_setting(value):
                    return choice
        return value

    def contains(self, config: Config) -> bool:
        data = config.normalized().model_dump()
        for name, choices in self.choices.items():
            if KNOBS[name].needs_workers and config.num_workers == 0:
                continue
            if self.spelling(name, data[name]) not in choices:
                return False
        return True

    def all_configs(self) -> Iterator[Config]:
        """Every distinct configuration of the space (workers-only knobs only with workers)."""
        workerless = [n for n in self.choices if not KNOBS[n].needs_workers]
        with_workers = [n for n in self.choices if KNOBS[n].needs_workers]
        for combo in itertools.product(*(self.choices[n] for n in workerless)):
            values = dict(zip(workerless, combo, strict=True))
            if values["num_workers"] == 0:
                yield self.config_from(values)
                continue
            for extra in itertools.product(*(self.choices[n] for n in with_workers)):
                yield self.config_from({**values, **dict(zip(with_workers, extra, strict=True))})

    def size(self) -> int:
        """How many distinct configurations the space holds."""
        workerless = {n: v for n, v in self.choices.items() if not KNOBS[n].needs_workers}
        per_worker = 1
        for name, values in self.choices.items():
            if KNOBS[name].needs_workers:
                per_worker *= len(values)
        total = 0
        for combo in itertools.product(*workerless.values()):
            workers = dict(zip(workerless, combo, strict=True))["num_workers"]
            total += per_worker if workers > 0 else 1
        return total

    # -- the first configurations -------------------------------------------------------------

    def _nearest(self, name: str, wanted: Any) -> Any:
        """The searched value closest to ``wanted`` (the checklist's values are rules of thumb
        and are moved onto the grid; the baseline's are not)."""
        choices = self.choices[name]
        if name == "prefetch_factor" and wanted is None:
            wanted = TORCH_DEFAULT_PREFETCH_FACTOR
        if wanted in choices:
            return wanted
        if isinstance(wanted, int) and not isinstance(wanted, bool):
            numbers = [c for c in choices if isinstance(c, int)]
            if numbers:
                return min(numbers, key=lambda c: (abs(c - wanted), c))
        return choices[0]

    def nearest_searched(self, config: Config) -> Config:
        """The configuration of the searched grid closest to ``config``, knob by knob."""
        data = config.model_dump()
        return self.config_from({name: self._nearest(name, data[name]) for name in KNOBS})

    def baseline(self) -> Config:
        """The user's current configuration, exactly as given (not moved onto the grid), or
        PyTorch's defaults with the workload's batch size.

        A fixed knob holds the baseline too unless ``--baseline`` names it; a knob that cannot
        change anything on this device keeps its default; with ``--effective-batch``, a batch
        size that does not divide it moves to the nearest one that does, since every trial
        holds the effective batch.
        """
        wanted: dict[str, Any] = {name: KNOBS[name].default for name in KNOBS}
        wanted["batch_size"] = self.workload.batch_size
        wanted.update({k: v for k, v in self.workload.baseline.items() if k in KNOBS})
        wanted.update(self.fixed)
        wanted.update(self._baseline_overrides)
        wanted.update({name: KNOBS[name].default for name in self.not_applicable})
        if self.effective_batch is not None and self.effective_batch % wanted["batch_size"]:
            # The effective batch is held constant in every trial, the baseline's included.
            wanted["batch_size"] = self._nearest("batch_size", wanted["batch_size"])
        return self.config_from(wanted)

    def _checklist_amp(self) -> str:
        """The seeds say "use AMP": bf16 where the hardware runs it natively, else fp16 on
        CUDA; a CPU without bf16 instructions keeps fp32 (emulated bf16 is slower)."""
        if self.device.bf16_native:
            return "bf16"
        return "fp16" if self.device.is_cuda else "off"

    def checklist(self) -> Config:
        """The seeds' checklist applied as written: what a careful user would set by hand."""
        wanted: dict[str, Any] = {
            "batch_size": self.workload.batch_size * 2,
            "num_workers": self.device.cpu_count,
            "pin_memory": True,
            "prefetch_factor": 2,
            "persistent_workers": True,
            "device_prefetch": True,
            "amp": self._checklist_amp(),
            "channels_last": True,
            "cudnn_benchmark": True,
            "tf32": True,
        }
        wanted.update(self.fixed)
        return self.config_from({name: self._nearest(name, v) for name, v in wanted.items()})

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary: searched values, fixed values, and why others were skipped."""
        return {
            "searched": {n: list(v) for n, v in self.searched.items()},
            "fixed": self.fixed,
            "not_applicable": dict(self.not_applicable),
            "size": self.size(),
        }


def check_knob_settings(
    fixed: Mapping[str, Any], ranges: Mapping[str, Any], baseline: Mapping[str, Any]
) -> None:
    """Refuse unknown knobs and malformed values before any device is known.

    Raises :class:`ConfigError` naming the option; applicability to the device is checked
    later, by :class:`SearchSpace`.
    """
    for name, value in fixed.items():
        coerce_knob_value(name, value, "--fix")
    for name, value in ranges.items():
        _parse_range(name, value)
    for name, value in baseline.items():
        coerce_knob_value(name, value, "--baseline")
