"""The results page keeps its hand-written sections: a run of the suite replaces only the run
between the page's markers, and the run it replaces goes to the month's file in the log."""

from __future__ import annotations

from pathlib import Path

from benchmarks._page import BEGIN, END, LATEST_RUN, is_page, replace_section, write_report

ROOT = Path(__file__).resolve().parent.parent


def _report(date: str, pick: str) -> str:
    return (
        "# autotune benchmark results (full run)\n\n"
        f"- Date: {date} UTC; whole suite took 50.0 min.\n\n"
        f"## 1. Search quality: the tuner against an exhaustive grid\n\npick {pick}\n\n"
        "## 3. Measurement quality\n\nold figures\n\n## 4. Cost of tuning\n\ncost\n"
    )


def _page(tmp_path: Path) -> Path:
    page = tmp_path / "RESULTS.md"
    run = _report("2026-11-30 10:00", "A").partition("\n")[2]
    page.write_text(
        "# Results\n\nintro, [log](log/README.md)\n\n"
        f"{BEGIN}\n{LATEST_RUN}\n{run}\n> a note on run A, see [misleading](RESULTS-misleading.md)"
        f"\n\n{END}\n\n## GPU\n\nhand-written\n"
    )
    return page


def test_a_run_replaces_the_pages_run_and_logs_the_one_before(tmp_path: Path) -> None:
    page = _page(tmp_path)
    logged = write_report(page, _report("2026-12-07 04:00", "B"))
    text = page.read_text()
    assert logged == tmp_path / "log" / "2026-11.md"
    assert text.startswith("# Results\n\nintro, [log](log/README.md)\n\n")
    assert text.endswith(f"{END}\n\n## GPU\n\nhand-written\n")
    assert f"{BEGIN}\n{LATEST_RUN}\n\n- Date: 2026-12-07 04:00 UTC" in text
    assert "pick B" in text and "pick A" not in text and "a note on run A" not in text
    log = logged.read_text()
    assert log.startswith("# Benchmark log: November 2026\n\n## RESULTS.md's run of 2026-11-30")
    # One level down under the entry's heading; links made relative to the log folder.
    assert "\n### 1. Search quality" in log and "pick A" in log
    assert "[misleading](../RESULTS-misleading.md)" in log
    assert LATEST_RUN + "\n" not in log

    write_report(page, _report("2026-12-08 04:00", "C"))
    assert (tmp_path / "log" / "2026-12.md").read_text().count("## RESULTS.md's run of") == 1
    assert logged.read_text() == log  # the month before is left as it was


def test_a_file_that_is_no_page_is_written_whole(tmp_path: Path) -> None:
    output = tmp_path / "report.md"
    output.write_text("anything\n")
    report = _report("2026-12-07 04:00", "B")
    assert write_report(output, report) is None
    assert output.read_text() == report
    assert not (tmp_path / "log").exists()


def test_a_section_replaced_on_a_page_goes_to_the_log(tmp_path: Path) -> None:
    page = _page(tmp_path)
    logged = replace_section(
        page, "## 3. Measurement quality", "## 4.", "## 3. Measurement quality\n\nnew figures\n"
    )
    text = page.read_text()
    assert "new figures" in text and "old figures" not in text
    assert text.endswith(f"{END}\n\n## GPU\n\nhand-written\n")
    assert logged == tmp_path / "log" / "2026-11.md"
    assert "### 3. Measurement quality\n\nold figures" in logged.read_text()


def test_the_committed_pages_hold_their_latest_run() -> None:
    for name in ("RESULTS.md", "RESULTS-misleading.md"):
        text = (ROOT / "benchmarks" / name).read_text()
        assert is_page(text), name
        run = text.partition(BEGIN)[2].partition(END)[0]
        assert run.startswith(f"\n{LATEST_RUN}\n\n- Date:"), name
