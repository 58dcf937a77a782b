"""Security headers on every response: what a browser may load, sniff or frame."""

from __future__ import annotations

from collections.abc import Collection

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The dashboard's scripts, stylesheet and data all come from this server (``/assets``,
#: ``/v1``). Styles also allow inline ones: plotly.js inserts ``<style>`` rules for its
#: toolbar and hover labels while it draws, which no hash known in advance can cover; scripts
#: stay limited to the served files. ``data:`` images: the page's empty icon and plotly's
#: picture export.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)

#: The policy of the API docs pages, served only where ``AUTOTUNE_API_DOCS`` turns them on:
#: FastAPI's pages load Swagger UI and ReDoc from a CDN and start them with an inline script,
#: so they need both; ReDoc also starts a worker from a ``blob:`` URL.
DOCS_CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net",
        "style-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net https://fonts.googleapis.com",
        "font-src https://fonts.gstatic.com",
        "img-src 'self' data: https://fastapi.tiangolo.com https://cdn.redoc.ly",
        "worker-src blob:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    ]
)

SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


class SecurityHeaders:
    """Add :data:`SECURITY_HEADERS` to every HTTP response, errors and refusals included.

    Installed outermost, so that the answers of the other limits carry them too; a header an
    endpoint set itself is kept. The ``docs_paths`` get :data:`DOCS_CONTENT_SECURITY_POLICY`.
    """

    def __init__(self, app: ASGIApp, docs_paths: Collection[str] = ()) -> None:
        self.app = app
        self.docs_paths = frozenset(docs_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        policy = DOCS_CONTENT_SECURITY_POLICY if scope["path"] in self.docs_paths else None

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                headers = MutableHeaders(scope=message)
                if policy is not None:
                    headers.setdefault("Content-Security-Policy", policy)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
