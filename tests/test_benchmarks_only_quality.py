"""``python -m benchmarks --only-quality`` replaces section 3 of an existing report: without
one it stops before measuring anything (a run that measured for a quarter of an hour and then
found nothing to write into lost its figures)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("report", [None, "# a report without section 3\n"])
def test_only_quality_without_a_report_to_write_into_fails_at_once(
        tmp_path: Path, report: str | None) -> None:
    output = tmp_path / "RESULTS.md"
    if report is not None:
        output.write_text(report)
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only-quality", "--output", str(output)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
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
