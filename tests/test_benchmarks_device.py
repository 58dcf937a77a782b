"""``python -m benchmarks --device``: refused at once where the device is missing, and the
report's device line naming the GPU (the CUDA run itself: tests/test_benchmarks_smoke.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autotune.measure import fingerprint
from benchmarks._report import device_line

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_cuda_without_a_gpu_fails_at_once_in_one_sentence(tmp_path: Path) -> None:
    output = tmp_path / "RESULTS.md"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--device",
            "cuda",
            "--smoke",
            "--output",
            str(output),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode != 0
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr  # no progress: it stopped before any work
    assert "--device cuda: no CUDA device is available here; use --device cpu" in lines[0]
    assert not output.exists()


def test_the_device_line_names_the_gpu_and_its_memory() -> None:
    machine = {
        **fingerprint(torch.device("cpu")),
        "device_type": "cuda",
        "device_name": "NVIDIA H100 80GB HBM3",
        "device_memory_bytes": 85_031_714_816,
        "compute_capability": [9, 0],
        "cuda": "12.8",
        "cudnn": 91002,
    }
    line = device_line("cuda:0", machine)
    assert line.startswith(
        "- Device: NVIDIA H100 80GB HBM3 (cuda:0), 79.2 GiB, compute "
        "capability 9.0, CUDA 12.8, cuDNN 91002;"
    )
