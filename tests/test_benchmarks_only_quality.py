"""``python -m benchmarks --only-quality`` replaces section 3 of an existing report: without
one it stops before measuring anything (a run that measured for a quarter of an hour and then
found nothing to write into lost its figures)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("report", [None, "# a report without section 3\n"])
def test_only_quality_without_a_report_to_write_into_fails_at_once(
    tmp_path: Path, report: str | None
) -> None:
    output = tmp_path / "RESULTS.md"
    if report is not None:
        output.write_text(report)
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only-quality", "--output", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode != 0
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr  # no progress: it stopped before any work
    assert f"{output} is not a report with a '## 3. Measurement quality' section" in lines[0]
    assert "pass --output a copy of benchmarks/RESULTS.md" in lines[0]
    if report is None:
        assert not output.exists()
    else:
        assert output.read_text() == report


def test_repeats_sets_the_runs_of_each_kind(tmp_path: Path) -> None:
    output = tmp_path / "RESULTS.md"
    output.write_text((ROOT / "benchmarks" / "RESULTS.md").read_text())
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--smoke",
            "--only-quality",
            "--repeats",
            "3",
            "--workload",
            "slow-storage",
            "--output",
            str(output),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr
    section = output.read_text().partition("## 3. Measurement quality")[2].partition("## 4.")[0]
    row = next(line for line in section.splitlines() if line.startswith("| slow-storage"))
    assert row.split("|")[3].strip() == "3"  # runs each
    assert "3 interleaved rounds" in section


def test_repeats_must_be_a_positive_count() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only-quality", "--repeats", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 2
    assert "'0' is not a count of runs; give a whole number of at least 1" in completed.stderr
