"""Limits on requests: body size and who may connect (checked before FastAPI), and how often
one client may submit."""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Collection

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .settings import is_loopback


class BodySizeLimit:
    """Answer 413 to a request whose body is larger than ``max_bytes``.

    A declared ``Content-Length`` is refused before anything is read; a streamed body is
    read up to the limit and then either refused or handed on whole.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(send)
            return
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._refuse(send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        await _send_error(
            send,
            413,
            (
                f"the request body is larger than {self.max_bytes} bytes; send a smaller body "
                "(a job's options fit in a few kilobytes)"
            ),
        )


class LoopbackClientsOnly:
    """Answer 403 to every client that is not on this machine.

    Installed when the server has no token, whatever way it was started (``autotune serve``
    checks its ``--host`` too, but ``uvicorn --host 0.0.0.0 --factory ...`` bypasses that):
    without a token, anyone who reaches the port could run code as the server's user.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        if scope["type"] == "http" and not (client and is_loopback(client[0])):
            await _send_error(
                send,
                403,
                (
                    "this server has no AUTOTUNE_API_TOKEN, so it only answers clients on its own "
                    "machine; set AUTOTUNE_API_TOKEN on the server and send it as a bearer token"
                ),
            )
            return
        await self.app(scope, receive, send)


class DatabaseAdmission:
    """Let at most ``limit`` requests in at once, and never more than the database pool can
    serve; the rest wait here, on the event loop, for their turn.

    Without it, more requests than connections deadlock: a sync endpoint's answer is serialised
    on a thread of the shared pool while its session still holds a connection, and those threads
    can all be taken by requests waiting for a connection, until the pool's timeout (30 s) fails
    them with 503. ``reserved`` connections are left to the embedded worker and to /readyz;
    the ``exempt`` paths (the probes) touch no connection and never wait here. A ``limit`` below
    the pool keeps few threads contending for the interpreter's lock with the event loop, which
    answers the probes (benchmarks/RESULTS.md#service-under-load).
    """

    def __init__(
        self, app: ASGIApp, exempt: Collection[str], limit: int, reserved: int = 3
    ) -> None:
        self.app = app
        self.exempt = frozenset(exempt)
        self.limit = limit
        self.reserved = reserved
        self._admitted: anyio.Semaphore | None = None  # made on the server's event loop

    def _semaphore(self, scope: Scope) -> anyio.Semaphore:
        if self._admitted is None:
            pool = scope["app"].state.database.engine.pool
            capacity = pool.size() + max(0, getattr(pool, "_max_overflow", 0))
            self._admitted = anyio.Semaphore(min(self.limit, max(1, capacity - self.reserved)))
        return self._admitted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        async with self._semaphore(scope):
            await self.app(scope, receive, send)


class SlidingWindowLimit:
    """At most ``limit`` events per client in any ``window_s`` seconds, counted in this process.

    Example:
        >>> clock = iter([0.0, 1.0, 2.0]).__next__
        >>> rate = SlidingWindowLimit(limit=2, window_s=60, clock=clock)
        >>> rate.admit("10.0.0.1"), rate.admit("10.0.0.1"), rate.admit("10.0.0.1")
        (None, None, 58)
    """

    #: Past this many clients, those without a recent event are forgotten.
    _SWEEP_AT = 10_000

    def __init__(
        self, limit: int, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit, self.window_s, self._clock = limit, window_s, clock
        self._events: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def admit(self, client: str) -> int | None:
        """Count an event of ``client``; None if it is within the limit, else the seconds to
        wait (for ``Retry-After``) before the oldest counted event leaves the window."""
        with self._lock:
            now = self._clock()
            if len(self._events) > self._SWEEP_AT:
                self._forget_idle(now)
            events = self._events.setdefault(client, deque())
            while events and events[0] <= now - self.window_s:
                events.popleft()
            if len(events) >= self.limit:
                return max(1, math.ceil(events[0] + self.window_s - now))
            events.append(now)
            return None

    def _forget_idle(self, now: float) -> None:
        for client in [
            c for c, events in self._events.items() if events[-1] <= now - self.window_s
        ]:
            del self._events[client]


async def _send_error(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
