"""The picks ``python -m benchmarks --only-quality`` re-measures are the ones the committed
report's section 1 shows: a section 3 refreshed on its own describes the tuner's pick of that
run, not an older one."""

from __future__ import annotations

from pathlib import Path

from benchmarks._harness import describe
from benchmarks._settings import COMMITTED_PICKS

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "RESULTS.md"


def _section_1_picks(report: str) -> dict[str, str]:
    """Workload -> the "tuner's pick" column of section 1's table: of its one row, or where the
    tuner ran once per seed, of the row marked "(median)" ("image-cnn, seed 1 (median)")."""
    section = report.partition("## 1. Search quality")[2].partition("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    column = header.index("tuner's pick")
    picks = {}
    for cells in ([cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]):
        name, _, seed = cells[0].partition(", seed ")
        if not seed or seed.endswith("(median)"):
            picks[name] = cells[column]
    return picks


def test_committed_picks_are_section_1s_picks() -> None:
    picks = _section_1_picks(RESULTS.read_text())
    assert set(COMMITTED_PICKS) <= set(picks)
    assert {name: describe(config) for name, config in COMMITTED_PICKS.items()} == {
        name: picks[name] for name in COMMITTED_PICKS
    }
