"""``python -m benchmarks.retain_freed_memory`` runs end to end and its table says what the knob
does: with glibc's defaults a text-transformer step faults its freed buffers in again, with the
knob it does not (fault counts, not speed: they do not depend on how busy the machine is)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from autotune.measure import glibc_malloc

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.skipif(not glibc_malloc(), reason="the knob needs glibc's malloc (Linux)")
def test_the_table_has_both_arms_and_the_knob_stops_the_faults() -> None:
    """Three rounds, whose median the table gives: now and then one process's step faults
    next to nothing with glibc's defaults (31 a step in one full test run on a 2-core EPYC,
    where three runs alone right after read 7,766-15,906): glibc's dynamic thresholds, and
    which of the step's threads' arenas freed what, settle differently from process to
    process."""
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.retain_freed_memory",
            "--workload",
            "text-transformer",
            "--rounds",
            "3",
            "--seconds",
            "0.5",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr
    rows = {
        cells[3]: cells
        for line in completed.stdout.splitlines()
        if line.startswith("| text-transformer")
        for cells in [[c.strip() for c in line.split("|")]]
    }
    assert set(rows) == {"glibc defaults", "retain_freed_memory"}, completed.stdout
    for cells in rows.values():
        assert float(cells[4].replace(",", "")) > 0  # samples/s
    assert rows["glibc defaults"][6] == "1.00x"
    faults = {arm: float(cells[7].replace(",", "")) for arm, cells in rows.items()}
    # A step frees and allocates buffers of megabytes: thousands of faults with the defaults
    # (7,887 a step measured at bs 64), a handful with the knob (12).
    assert faults["glibc defaults"] > 100, completed.stdout
    assert faults["retain_freed_memory"] < faults["glibc defaults"] / 10, completed.stdout
