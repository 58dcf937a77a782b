"""The baseline is exactly what the user runs today, measured as given (issue 7, point 1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autotune.search import InfeasibleSet, SearchState, off_grid_baseline
from autotune.space import Config, DeviceInfo, SearchSpace, WorkloadInfo

CPU = DeviceInfo(type="cpu", name="cpu", memory_bytes=2**34, cpu_count=2)
TWELVE = WorkloadInfo(name="w", dataset_length=1024, input_batch_ndim=2, batch_size=12)


def test_off_grid_baseline_is_kept_exactly_and_measured_apart() -> None:
    space = SearchSpace(CPU, TWELVE, baseline={"num_workers": 5, "prefetch_factor": 3})
    baseline = space.baseline()
    assert (baseline.batch_size, baseline.num_workers, baseline.prefetch_factor) == (12, 5, 3)
    assert not space.contains(baseline)
    state = SearchState(InfeasibleSet())
    assert off_grid_baseline(space, state) == baseline
    state.values[baseline.key()] = 100.0  # measured (or resumed): not measured again
    assert off_grid_baseline(space, state) is None


def test_baseline_on_the_grid_goes_through_optuna() -> None:
    space = SearchSpace(CPU, TWELVE, baseline={"batch_size": 16})
    assert space.contains(space.baseline())
    assert off_grid_baseline(space, SearchState(InfeasibleSet())) is None


@pytest.mark.slow
def test_a_new_user_sees_their_own_baseline_and_a_speedup_against_it(
    tmp_path: Path, workload_file: Any
) -> None:
    out = tmp_path / "best.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            "run",
            workload_file("batch_12"),
            "--baseline",
            "num_workers=5",
            "--baseline",
            "prefetch_factor=3",
            "--trials",
            "3",
            "--device",
            "cpu",
            "--db",
            str(tmp_path / "a.db"),
            "--out",
            str(out),
            "--min-seconds",
            "0.3",
            "--min-steps",
            "3",
            "--warmup-steps",
            "1",
            "--confirm-top",
            "1",
            "--confirm-rounds",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    expected = Config(batch_size=12, num_workers=5, prefetch_factor=3).public_dict()
    assert document["baseline"]["config"] == expected
    assert document["baseline"]["metrics"]["samples_per_s"] > 0
    assert document["speedup"] == pytest.approx(
        document["metrics"]["samples_per_s"] / document["baseline"]["metrics"]["samples_per_s"]
    )
