"""``python -m benchmarks.confirm_window`` runs end to end and gives each window length a row
of figures that can be true."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_each_window_gets_a_row_of_paired_figures() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.confirm_window",
            "--workloads",
            "text-transformer",
            "--rounds",
            "2",
            "--windows",
            "0.5,1.5",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr
    rows = [
        line.strip("|").split("|")
        for line in completed.stdout.splitlines()
        if line.startswith("| text-transformer")
    ]
    assert [row[1].strip() for row in rows] == ["0.5 s", "1.5 s"]
    for row in rows:
        defaults, candidate = (float(cell.split()[0].replace(",", "")) for cell in row[2:4])
        ratio, low_high, seconds = float(row[4]), row[6].split("-"), float(row[7].split()[0])
        assert defaults > 0 and candidate > 0
        # The median of two paired ratios lies between them, and near candidate / defaults.
        assert float(low_high[0]) <= ratio <= float(low_high[1])
        assert 0.5 < ratio / (candidate / defaults) < 2
        assert seconds > float(row[1].split()[0])  # a run lasts longer than its window
