"""The limits every job's options are held to, in the library the CLI and the API share: the
size parser, knob values, numbers, text."""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest
from pydantic import ValidationError

from autotune.cli import main
from autotune.errors import ConfigError
from autotune.space import coerce_knob_value, has_control_character
from autotune.tuner import TuneOptions, parse_memory
from autotune.tuner._options import MAX_MEMORY_BYTES

GIB = 2**30


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("8GB", 8 * 10**9),
        (" 512MiB ", 512 * 2**20),
        ("8 gib", 8 * GIB),
        ("1.5G", 15 * 10**8),
        ("50%", 8 * GIB),
        ("1000", 1000),
        (4096, 4096),
        ("1024TiB", MAX_MEMORY_BYTES),
    ],
)
def test_sizes_parse(text: str | int, size: int) -> None:
    assert parse_memory(text, 16 * GIB) == size


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("lots", "'lots' is not a size"),
        ("8" + " " * 30_000 + "x", "of 30002 characters is not a size"),
        ("9" * 400 + "TB", "of 402 characters is not a size"),
        ("999999999999 TB", "is more than 1 PiB (2**50 bytes)"),
        (10**400, "of about 401 digits is more than 1 PiB"),
        (2**50 + 1, "is more than 1 PiB"),
        (0, "must be positive"),
        ("0%", "a percentage must be in (0, 100]"),
        ("8GB\x00", "is not a size"),
        ("٨GB", "is not a size"),  # digits of other scripts are not sizes
    ],
)
def test_bad_sizes_are_one_sentence(value: str | int, message: str) -> None:
    with pytest.raises(ConfigError, match="^--max-memory ") as refused:
        parse_memory(value, 16 * GIB)
    assert message in str(refused.value)
    assert len(str(refused.value)) < 200


@pytest.mark.parametrize("padding", [" ", "\t", "0", "1.", "GB"])
def test_the_size_parser_is_linear_in_its_input(padding: str) -> None:
    """A 64 KiB value (the largest body the API reads) is refused at once, whatever repeats in
    it: a pattern that backtracked over surrounding spaces took seconds for 16 KB."""
    for value in ("8" + padding * 65_536 + "x", padding * 65_536 + "8x", " " * 65_536):
        started = time.perf_counter()
        with pytest.raises(ConfigError):
            parse_memory(value, GIB)
        assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("batch_size", float("inf"), "batch_size takes a whole number"),
        ("batch_size", float("nan"), "batch_size takes a whole number"),
        ("batch_size", 10**400, "far out of range for batch_size"),
        ("batch_size", "1" + "0" * 200, "far out of range for batch_size"),
        ("batch_size", 1e300, "far out of range for batch_size"),
        ("batch_size", 10**12, "is more than 1048576 (2**20); use a smaller batch"),
        ("intra_op_threads", 10**6, "intra_op_threads 1000000 is more than 4096"),
        ("amp", "bf16\x00", "holds a control character"),
        ("amp", "x" * 100_000, "a value of 100000 characters is too long"),
        ("tf32", [1], "tf32=a list: tf32 takes true or false"),
        ("prefetch_factor", {"a": 1}, "takes a whole number"),
        ("x" * 10_000, 1, "unknown knob 'xxxx"),
    ],
)
def test_bad_knob_values_are_one_short_sentence(name: str, raw: Any, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        coerce_knob_value(name, raw)
    assert message in str(refused.value)
    assert len(str(refused.value)) < 400


def test_whole_numbers_in_any_spelling_are_still_taken() -> None:
    assert coerce_knob_value("batch_size", 64.0) == 64
    assert coerce_knob_value("batch_size", " 64 ") == 64
    assert coerce_knob_value("batch_size", 2**20) == 2**20
    assert coerce_knob_value("prefetch_factor", "null") is None


def test_control_characters_are_named() -> None:
    assert has_control_character("cpu: x\x00, 4 cores")
    assert has_control_character("a\nb") and has_control_character("\ud800")
    assert not has_control_character("cuda: NVIDIA <GPU name> äöü")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_seconds": float("nan")}, "min_seconds is nan, not a finite number"),
        ({"time_budget_s": float("inf")}, "time_budget_s is inf, not a finite number"),
        ({"seed": float("-inf")}, "seed is -inf, not a finite number"),
        ({"device_class": "cpu: x\x00, 4 cores"}, "device_class holds a control character"),
        ({"workload": "tiny\x1b[2J"}, "workload holds a control character"),
        ({"max_memory": 1e300}, "max_memory of about 301 digits is more than 1 PiB"),
        ({"max_memory": 8.5}, "max_memory 8.5 is not a whole number of bytes"),
        ({"max_memory": float("nan")}, "is not a whole number of bytes"),
        ({"fixed": {"batch_size": 10**12}}, "is more than 1048576"),
        ({"ranges": {"batch_size": {"min": 8, "max": 10**400}}}, "min and max take whole"),
        ({"ranges": {"batch_size": {"min": [[8]]}}}, "min and max take whole numbers"),
        ({"ranges": {"batch_size": "8.." + "9" * 400}}, "a value of 403 characters is too"),
    ],
)
def test_tune_options_refuse_with_a_sentence(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        TuneOptions(**{"workload": "builtin:image-cnn", **options})
    assert message in str(refused.value)


def test_the_cli_refuses_a_hostile_max_memory_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``autotune run --max-memory`` shares the parser: exit 2, one line, no wait."""
    value = "8" + " " * 65_536 + "x"
    monkeypatch.setattr(
        sys, "argv", ["autotune", "run", "builtin:image-cnn", "--max-memory", value]
    )
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("autotune: error: --max-memory: max_memory of 65538 characters")
    assert error.endswith("write bytes, 8GB, 512MiB or 80%") and "\n" not in error
