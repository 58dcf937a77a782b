"""The benchmark suite's smoke run writes a report with every section, each holding numbers,
on the CPU and (where one is present) on a CUDA GPU."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import rows

from benchmarks._settings import SMOKE

ROOT = Path(__file__).resolve().parent.parent
#: Section titles, and whether the table's last column is a ratio every row must have.
SECTIONS = {
    "1. Search quality": True,
    "1b. The tuner as users run it": True,
    "2. Against what users do instead": True,
    "3. Measurement quality": False,
    "4. Cost of tuning": False,
    "5. The limit": True,
}
HEADER_ITEMS = ("- Date:", "- Machine:", "- Device:", "- Versions:", "- Measurement plan")
#: A figure as the report writes it: 1,234 / 0.95x / 12.5% / 17 s.
FIGURE = re.compile(r"^\d[\d,]*(\.\d+)?(x|%| s)?$")
#: Seconds the smoke run may take: a GPU run also compiles in section 1b's default space. A
#: 2-core CPU without AVX-512 emulates bf16 and takes up to twice as long as one with it.
TIMEOUT_S = {"cpu": 900, "cuda": 660}


def _sections(report: str) -> dict[str, str]:
    parts = report.split("\n## ")[1:]
    return {part.splitlines()[0]: part for part in parts}


def _table_rows(section: str) -> list[list[str]]:
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def _device_line(report: str) -> str:
    return next(line for line in report.splitlines() if line.startswith("- Device:"))


def _expected_device(device: str) -> str:
    """What the report's device line must name: the GPU's name on CUDA."""
    return torch.cuda.get_device_name(0) if device == "cuda" else "CPU only"


def assert_every_section_has_numbers(report: str) -> None:
    for item in HEADER_ITEMS:
        assert item in report, f"the header lacks {item!r}"
    sections = _sections(report)
    finders_installed = all(importlib.util.find_spec(m) for m in ("lightning", "accelerate"))
    for title, ends_in_ratio in SECTIONS.items():
        matching = [body for name, body in sections.items() if name.startswith(title)]
        assert matching, f"section {title!r} is missing"
        rows = _table_rows(matching[0])
        assert rows, f"section {title!r} has no table rows"
        for row in rows:
            if not finders_installed and any(cell.startswith("not run") for cell in row):
                continue
            assert any(FIGURE.match(cell) for cell in row), f"{title}: a row has no figure: {row}"
            if ends_in_ratio:
                assert FIGURE.match(row[-1]), f"{title}: a row has no ratio: {row}"


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_smoke_suite_writes_every_section_with_numbers(tmp_path: Path, device: str) -> None:
    output, databases = tmp_path / "RESULTS.md", tmp_path / "databases"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--smoke",
            "--device",
            device,
            "--output",
            str(output),
            "--databases",
            str(databases),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S[device],
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = output.read_text()
    assert _expected_device(device) in _device_line(report)
    assert_every_section_has_numbers(report)
    # Section 1 shows each seed's tuner job and marks the one it is judged on.
    [section_1] = [
        body for name, body in _sections(report).items() if name.startswith("1. Search quality")
    ]
    labels = [row[0] for row in _table_rows(section_1)]
    assert labels[0].startswith("slow-storage, seed 0")
    assert len(labels) == SMOKE.tuner_runs
    assert sum(label.endswith("(median)") for label in labels) == 1
    # The tuner's jobs are kept, trial by trial: section 1's (one per seed), the plain search's,
    # the default space's and the trial budgets of section 4.
    jobs = rows(
        databases / "slow-storage.db",
        "select status, (select count(*) from autotune_trials t "
        "where t.job_id = j.id) from autotune_jobs j",
    )
    assert len(jobs) == SMOKE.tuner_runs + 3
    assert all(status == "succeeded" and trials for status, trials in jobs)
