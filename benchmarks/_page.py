"""The results page: the suite's latest run kept between two markers, each run it replaces
appended to the month's file in the log beside the page.

A page (``benchmarks/RESULTS.md``) holds hand-written sections around one generated run; a
run of the suite replaces that run only, so the page stays the current figures and the log
(``benchmarks/log/YYYY-MM.md``) keeps every run before it, notes written into it included.
Any other output file is a plain report, written whole.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

#: The markers around the generated run on a page; the page's other sections are kept.
BEGIN = "<!-- the latest run: written by python -m benchmarks, which moves it to log/ -->"
END = "<!-- the latest run ends here -->"
#: The heading a report's title becomes on a page.
LATEST_RUN = "## The latest run"

_DATE = re.compile(r"(\d{4})-(\d{2})-\d{2}")
#: A Markdown link's target, relative to the page's folder (no scheme, anchor or ``/``).
_RELATIVE_LINK = re.compile(r"\]\((?![a-z]+:|#|/)([^)]+)\)")


def is_page(text: str) -> bool:
    return BEGIN in text and END in text


def _month(text: str) -> str:
    """``YYYY-MM`` of the run's ``- Date:`` line, else of the first date in it, else now."""
    dated = next((line for line in text.splitlines() if line.startswith("- Date:")), text)
    found = _DATE.search(dated) or _DATE.search(text)
    return f"{found[1]}-{found[2]}" if found else f"{datetime.now(UTC):%Y-%m}"


def _demoted(text: str) -> str:
    """Every heading one level down, to sit under the log entry's own heading."""
    return "\n".join("#" + line if line.startswith("#") else line for line in text.splitlines())


def _relinked(text: str) -> str:
    """The page's relative links, made relative to the log folder."""

    def moved(link: re.Match[str]) -> str:
        target = link[1]
        return f"]({target.removeprefix('log/') if target.startswith('log/') else '../' + target})"

    return _RELATIVE_LINK.sub(moved, text)


def append_to_log(page: Path, text: str, title: str, month: str) -> Path:
    """Append ``text`` (a part of ``page`` that a newer run replaced) under ``## title`` to the
    log file of its ``month`` (``YYYY-MM``), ``log/YYYY-MM.md`` beside the page; returns it."""
    log = page.parent / "log" / f"{month}.md"
    if log.is_file():
        before = log.read_text().rstrip("\n") + "\n\n"
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        before = f"# Benchmark log: {datetime.strptime(month, '%Y-%m'):%B %Y}\n\n"
    log.write_text(f"{before}## {title}\n\n{_relinked(_demoted(text.strip()))}\n")
    return log


def _today() -> str:
    return f"{datetime.now(UTC):%Y-%m-%d}"


def _run_date(run: str) -> str:
    dated = next((line for line in run.splitlines() if line.startswith("- Date:")), "")
    return dated.removeprefix("- Date:").split(";")[0].strip() or "an unknown date"


def write_report(output: Path, report: str) -> Path | None:
    """Write a suite's report to ``output``.

    On a page, only the run between the markers is replaced (the report's title becomes
    ``## The latest run``) and the run it replaces is appended to the log, whose file is
    returned; anything else is overwritten with the report, and None returned.
    """
    old = output.read_text() if output.is_file() else ""
    if not is_page(old):
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(report)
        return None
    head, _, rest = old.partition(BEGIN)
    previous, _, tail = rest.partition(END)
    _title, _, body = report.partition("\n")
    output.write_text(f"{head}{BEGIN}\n{LATEST_RUN}\n{body.rstrip()}\n\n{END}{tail}")
    previous = previous.strip().removeprefix(LATEST_RUN)
    title = f"{output.name}'s run of {_run_date(previous)}, replaced on {_today()}"
    return append_to_log(output, previous, title, _month(previous))


def replace_section(output: Path, heading: str, next_heading: str, section: str) -> Path | None:
    """Replace the section of ``output`` from ``heading`` to ``next_heading`` with ``section``
    (which starts with its own heading). On a page the section it replaces is appended to the
    log, whose file is returned; otherwise None."""
    text = output.read_text()
    head, _, rest = text.partition(heading)
    replaced, _, tail = rest.partition(next_heading)
    output.write_text(head + section + "\n" + next_heading + tail)
    if not is_page(text):
        return None
    run = text.partition(BEGIN)[2]
    title = f"{output.name}'s section of the run of {_run_date(run)}, replaced on {_today()}"
    # The section's own date where it was re-measured apart from its run, else the run's.
    month = _month(replaced) if _DATE.search(replaced) else _month(run)
    return append_to_log(output, heading + replaced, title, month)
