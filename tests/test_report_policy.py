"""The report file's Content-Security-Policy allows exactly its own inline scripts.

The browser tests (tests/test_report.py) show the page draws under it and an added script does
not run; this checks the policy's text without a browser.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re

from autotune.report import report_page

PAGE = report_page({"job": {"id": 1, "workload": "builtin:image-cnn"}})


def policy() -> dict[str, list[str]]:
    found = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', PAGE)
    assert found, "the report has no Content-Security-Policy"
    directives = [d.split() for d in html.unescape(found.group(1)).split(";")]
    return {name: sources for name, *sources in directives}


def test_the_policy_comes_before_any_script_or_style() -> None:
    assert PAGE.index("Content-Security-Policy") < min(PAGE.index("<script"), PAGE.index("<style"))


def test_script_src_is_the_hash_of_each_executable_script_and_nothing_else() -> None:
    scripts = re.findall(r"<script>(.*?)</script>", PAGE, re.S)  # no type: executable
    assert len(scripts) == 2  # plotly.js and the page's script
    hashes = [
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in scripts
    ]
    assert policy()["script-src"] == hashes


def test_nothing_is_loaded_from_anywhere() -> None:
    directives = policy()
    assert directives["default-src"] == ["'none'"]
    assert directives["object-src"] == ["'none'"] and directives["base-uri"] == ["'none'"]
    assert "'unsafe-inline'" not in directives["script-src"]
