"""``python -m benchmarks.training_thread`` runs end to end on the CPU and each configuration's
line holds every part it times, as numbers that can be true."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_every_configuration_reports_each_part_it_times() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.training_thread", "--device", "cpu", "--seconds", "0.3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    header, *rows = [json.loads(line) for line in completed.stdout.splitlines()]
    assert header["device"] == "cpu" and rows
    for row in rows:
        batch = row["config"]["batch_size"]
        for part in ("step_synchronised", "step_back_to_back"):
            step = row[part]
            # A step's time and its rate describe the same steps (median against mean).
            assert 0.5 < step["samples_per_s"] * step["ms_median"] / 1e3 / batch < 2
            assert step["thread_cpu_ms_per_step"] > 0
        assert row["copy_ms"] >= 0
        assert row["loader_alone"]["samples_per_s"] > 0 and row["loader_alone"]["receive_ms"] > 0
        assert 0 <= row["lockstep"]["data_wait"] < 1 and row["lockstep"]["samples_per_s"] > 0
        assert row["trial"]["samples_per_s"] > 0


@pytest.mark.slow
def test_configurations_given_on_the_command_line_replace_the_defaults_round_by_round() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.training_thread",
            "--device",
            "cpu",
            "--seconds",
            "0.3",
            "--config",
            "64:0:off",
            "--config",
            "32:0:bf16",
            "--rounds",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    _, *rows = [json.loads(line) for line in completed.stdout.splitlines()]
    assert [
        (row["config"]["batch_size"], row["config"]["num_workers"], row["config"]["amp"])
        for row in rows
    ] == [(64, 0, "off"), (32, 0, "bf16")] * 2
    assert all(row["lockstep"]["samples_per_s"] > 0 for row in rows)


def test_a_malformed_configuration_is_refused_with_its_form() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.training_thread",
            "--device",
            "cpu",
            "--config",
            "64:zero:off",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2
    assert "is not BATCH:WORKERS:AMP; write it like 256:0:bf16" in completed.stderr
