"""The job page's HTML: linked assets for the service, everything inlined for a report file."""

from __future__ import annotations

import base64
import hashlib
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


def _inline_script(code: str) -> tuple[str, str]:
    """A ``<script>`` element holding ``code``, and the CSP source that allows exactly it."""
    body = f"\n{code}\n"
    digest = base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode("ascii")
    return f"<script>{body}</script>", f"'sha256-{digest}'"


def report_policy(script_sources: list[str]) -> str:
    """The report file's Content-Security-Policy: its own inline scripts (by hash) and nothing
    from anywhere else. Styles are inline too, and plotly.js inserts more while it draws."""
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src {' '.join(script_sources)}",
            "style-src 'unsafe-inline'",
            "img-src data:",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'none'",
        ]
    )


def report_page(data: dict[str, Any]) -> str:
    """One self-contained HTML file of the job page, for ``data`` from :func:`job_page_data`.

    Nothing is fetched when it opens: plotly.js, the page's script and style and the job's data
    are all inside it. Its Content-Security-Policy (a ``<meta>``, since a file has no headers)
    runs only those scripts, so text from the job that got past the escaping could not run.
    """
    job = data["job"]
    scripts = [_inline_script(inline("plotly")), _inline_script(inline("page.js"))]
    policy = report_policy([source for _, source in scripts])
    head = (
        f'<meta http-equiv="Content-Security-Policy" content="{html.escape(policy)}">\n'
        f"<style>\n{inline('page.css')}\n</style>"
    )
    tail = "\n".join(
        [
            f'<script type="application/json" id="autotune-data">{_script_json(data)}</script>',
            *(element for element, _ in scripts),
        ]
    )
    return _render("job", f"autotune job {job['id']}: {job['workload']}", head, tail, job["id"])


def write_report(database: Database, job_id: int, path: Path) -> None:
    """Write the report of job ``job_id`` to ``path`` (whole or not at all)."""
    with database.session() as session:
        page = report_page(job_page_data(session, job_id))
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(page, encoding="utf-8")
    os.replace(temporary, path)
