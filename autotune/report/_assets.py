"""The page's scripts and stylesheet: plotly.js from the ``plotly`` package, and our own files.

Each asset is named after its content (``page-<hash>.js``, ``plotly-<version>.min.js``), so a
browser may cache it for good: a new release changes the name, never the bytes behind one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

#: Our own assets, by role: the ``static/`` files each is joined from, in order, and its media
#: type. The page's script is two files served as one: plots.js (the plots and the helpers they
#: share) before page.js, which reads them; the page links or inlines a single script.
_OWN_FILES = {
    "page.js": (("plots.js", "page.js"), "text/javascript; charset=utf-8"),
    "page.css": (("page.css",), "text/css; charset=utf-8"),
}


@dataclass(frozen=True)
class Asset:
    """One script or stylesheet, under the name the page links it by."""

    name: str
    body: bytes
    media_type: str


@cache
def static_text(name: str) -> str:
    return files("autotune.report").joinpath("static", name).read_text(encoding="utf-8")


def _plotly_js() -> Asset:
    import plotly
    from plotly.offline import get_plotlyjs

    return Asset(
        f"plotly-{plotly.__version__}.min.js",
        get_plotlyjs().encode(),
        "text/javascript; charset=utf-8",
    )


def _own(role: str, parts: tuple[str, ...], media_type: str) -> Asset:
    body = "\n".join(static_text(part) for part in parts).encode()
    stem, suffix = role.rsplit(".", 1)
    return Asset(f"{stem}-{hashlib.sha256(body).hexdigest()[:12]}.{suffix}", body, media_type)


@cache
def _assets() -> dict[str, Asset]:
    # Keyed by role ("plotly", "page.js", "page.css"): the template links them by role.
    own = {role: _own(role, parts, media) for role, (parts, media) in _OWN_FILES.items()}
    return {"plotly": _plotly_js(), **own}


def asset_names() -> dict[str, str]:
    """The served file name of each asset, by role (``plotly``, ``page.js``, ``page.css``)."""
    return {role: entry.name for role, entry in _assets().items()}


def asset(name: str) -> Asset | None:
    """The asset served under ``name``, or None when no asset has that name."""
    return next((entry for entry in _assets().values() if entry.name == name), None)


def inline(role: str) -> str:
    return _assets()[role].body.decode()
