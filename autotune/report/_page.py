"""The job page's HTML: linked assets for the service, everything inlined for a report file."""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any, Literal

from autotune.report._assets import asset_names, inline, static_text
from autotune.report._data import job_page_data
from autotune.store import Database

#: The page's views: the jobs list, one job, two jobs side by side.
View = Literal["jobs", "job", "compare"]

#: Where the service serves the assets (``api/routes/dashboard.py``).
ASSETS_PATH = "/assets"


def _render(view: View, title: str, head: str, tail: str, job_id: int | None) -> str:
    attributes = f'data-view="{view}"' + (f' data-job="{job_id}"' if job_id else "")
    return (
        static_text("page.html")
        .replace("<!--title-->", html.escape(title))
        .replace("<!--head-->", head)
        .replace('data-view=""', attributes)
        .replace("<!--tail-->", tail)
    )


def service_page(view: View, job_id: int | None = None) -> str:
    """The live page the service serves: its script reads the job through the ``/v1`` API."""
    names = asset_names()
    title = {
        "jobs": "autotune jobs",
        "job": f"autotune job {job_id}",
        "compare": "autotune: compare jobs",
    }[view]
    head = f'<link rel="stylesheet" href="{ASSETS_PATH}/{names["page.css"]}">'
    tail = (
        f'<script src="{ASSETS_PATH}/{names["plotly"]}"></script>\n'
        f'<script src="{ASSETS_PATH}/{names["page.js"]}"></script>'
    )
    return _render(view, title, head, tail, job_id)


def _script_json(document: Any) -> str:
    # Inside <script>, "</script>" or "<!--" in a string would end or corrupt the element.
    return json.dumps(document, separators=(",", ":")).replace("<", "\\u003c")


def report_page(data: dict[str, Any]) -> str:
    """One self-contained HTML file of the job page, for ``data`` from :func:`job_page_data`.

    Nothing is fetched when it opens: plotly.js, the page's script and style and the job's data
    are all inside it.
    """
    job = data["job"]
    head = f"<style>\n{inline('page.css')}\n</style>"
    tail = (
        f'<script type="application/json" id="autotune-data">{_script_json(data)}</script>\n'
        f"<script>\n{inline('plotly')}\n</script>\n<script>\n{inline('page.js')}\n</script>"
    )
    return _render("job", f"autotune job {job['id']}: {job['workload']}", head, tail, job["id"])


def write_report(database: Database, job_id: int, path: Path) -> None:
    """Write the report of job ``job_id`` to ``path`` (whole or not at all)."""
    with database.session() as session:
        page = report_page(job_page_data(session, job_id))
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(page, encoding="utf-8")
    os.replace(temporary, path)
