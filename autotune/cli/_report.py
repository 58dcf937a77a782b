"""``autotune report``: a job's page as one self-contained HTML file."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from autotune.errors import ConfigError
from autotune.report import write_report
from autotune.store import open_database

console = Console(highlight=False)


def report(
    job: Annotated[int, typer.Argument(min=1, help="The job's id (autotune run prints it).")],
    out: Annotated[Path, typer.Option(help="The HTML file to write.")] = Path("report.html"),
    db: Annotated[
        str | None,
        typer.Option(
            "--db", help="Database URL or SQLite file (default: $AUTOTUNE_DB or ./autotune.db)."
        ),
    ] = None,
) -> None:
    """Write JOB's recommendation, plots and trials as one HTML file that opens offline."""
    if not out.parent.is_dir():
        raise ConfigError(
            f"--out {out}: the folder {out.parent} does not exist; create it or "
            "write the report elsewhere"
        )
    write_report(open_database(db), job, out)
    console.print(f"wrote {out}: open it in a browser (it needs no network)", soft_wrap=True)


def report_hint(job_id: int, db: str | None) -> str:
    """The command that writes a job's report, as ``autotune run`` prints it."""
    where = f" --db {shlex.quote(db)}" if db else ""
    return f"see it: autotune report {job_id}{where} --out report.html"


def register(app: typer.Typer) -> None:
    app.command()(report)
