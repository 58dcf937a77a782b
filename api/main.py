"""The FastAPI application: ``create_app(settings)`` wires routes, errors, limits, the worker."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from anyio import CapacityLimiter
from fastapi import APIRouter, Depends, FastAPI, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.middleware.trustedhost import TrustedHostMiddleware
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import (
    DataError,
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from autotune import __version__
from autotune.errors import AutotuneError, StoreError
from autotune.service import ClaimPolicy, JobNotFoundError, JobStateError, Worker
from autotune.store import embedded_worker_slot, open_database, try_file_lock

from .deps import require_token
from .headers import SecurityHeaders
from .limits import BodySizeLimit, DatabaseAdmission, LoopbackClientsOnly, SlidingWindowLimit
from .routes import dashboard, devices, jobs, ops, system, workloads
from .schemas import ErrorPublic
from .settings import Settings, load_settings

log = logging.getLogger("autotune.api")

#: Which status each error a user can cause is answered with.
_STATUS_OF = (
    (JobNotFoundError, status.HTTP_404_NOT_FOUND),
    (JobStateError, status.HTTP_409_CONFLICT),
    (StoreError, status.HTTP_503_SERVICE_UNAVAILABLE),
    (AutotuneError, 422),  # FastAPI's status for invalid input
)


def _error(status_code: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status_code)


async def _autotune_error(request: Request, exc: Exception) -> JSONResponse:
    code = next(code for kind, code in _STATUS_OF if isinstance(exc, kind))
    return _error(code, str(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's and FastAPI's own errors, in sentences that say what to do."""
    assert isinstance(exc, StarletteHTTPException)
    path, method = request.url.path, request.method
    detail = {
        status.HTTP_400_BAD_REQUEST: "the request body could not be read as UTF-8 JSON; send "
        'a JSON object such as {"workload": "builtin:image-cnn"}',
        status.HTTP_404_NOT_FOUND: f"there is no {path}; /openapi.json lists the API's paths",
        status.HTTP_405_METHOD_NOT_ALLOWED: f"{method} is not allowed on {path}; /openapi.json "
        "lists the methods each path takes",
    }.get(exc.status_code)
    if detail is None:
        return await http_exception_handler(request, exc)
    return JSONResponse({"detail": detail}, exc.status_code, headers=exc.headers)


#: How much of a sent value a 422 echoes: strings cut to this many characters, nesting elided
#: below this depth.
_ECHO_CHARS, _ECHO_DEPTH = 200, 4


def _echoable(value: Any, depth: int = 0) -> Any:
    """``value`` as a 422 may echo it: strict JSON can carry it (NaN and Infinity become
    text) and it stays small (long text cut, deep nesting elided)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return "(a number too large to echo)"
    if value is None or isinstance(value, bool | int | float):
        return value
    if depth >= _ECHO_DEPTH and isinstance(value, dict | list | tuple):
        return "..."
    if isinstance(value, dict):
        return {_echoable(str(key)): _echoable(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_echoable(item, depth + 1) for item in value]
    text = _utf8(str(value))
    return text if len(text) <= _ECHO_CHARS else f"{text[:_ECHO_CHARS]}..."


def _utf8(text: str) -> str:
    """``text`` with what UTF-8 cannot encode (half a surrogate pair, sent as JSON's
    ``\\ud800``) replaced."""
    return text.encode("utf-8", "replace").decode("utf-8")


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422 body, each error's sent value and context made safe to echo."""
    assert isinstance(exc, RequestValidationError)
    errors = [
        {
            **error,
            "msg": _utf8(str(error.get("msg", ""))),
            "loc": [_echoable(part) for part in error.get("loc", ())],
            **{key: _echoable(error[key]) for key in ("input", "ctx") if key in error},
        }
        for error in exc.errors()
    ]
    return JSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    """A value the database refuses is the request's fault (422); only a database out of
    reach is 503, and anything else is a fault of the server's own (500)."""
    if isinstance(exc, DataError | IntegrityError):
        log.info("database refused %s %s: %s", request.method, request.url.path, exc)
        return _error(
            422,
            "the database refused a value of this request (text or a number it cannot "
            "store, or one that conflicts with what it holds); correct it and send it again",
        )
    lost = (OperationalError, InterfaceError, DisconnectionError, PoolTimeoutError)
    if not isinstance(exc, lost):
        log.error("database error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error(
            status.HTTP_500_INTERNAL_SERVER_ERROR,
            "the server's database query failed; its log holds the details, please report it",
        )
    log.warning("database error on %s %s: %s", request.method, request.url.path, exc)
    return _error(
        status.HTTP_503_SERVICE_UNAVAILABLE,
        "the database did not answer; check "
        "that it is running and reachable from the server, then retry",
    )


def _start_worker(app: FastAPI, settings: Settings) -> bool:
    """Start the embedded worker, unless another process of this server already runs one.

    ``uvicorn --workers N`` runs the app N times: only the first process gets a worker (the
    others would only queue up on the device's lock).
    """
    slot = try_file_lock(embedded_worker_slot(settings.db, settings.device))
    if slot is None:
        log.warning(
            "another server process on this host already runs the embedded worker "
            "for device %s; this one serves the API only",
            settings.device,
        )
        return False
    worker = Worker(
        app.state.database,
        ClaimPolicy(settings.heartbeat_timeout_s, settings.max_attempts),
        heartbeat_interval_s=settings.heartbeat_interval_s,
        device=settings.device,
        workloads_dir=settings.workloads_dir,
    )
    thread = threading.Thread(target=worker.run, name="embedded-worker", daemon=True)
    thread.start()
    app.state.worker, app.state.worker_thread, app.state.worker_slot = worker, thread, slot
    return True


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    app.state.database = open_database(settings.db)
    has_worker = settings.embedded_worker and _start_worker(app, settings)
    try:
        yield
    finally:
        if has_worker:
            # Stops the running trial and puts its job back in the queue to resume later.
            app.state.worker.stop()
            app.state.worker_thread.join(timeout=60)
            app.state.worker_slot.close()
        app.state.database.dispose()


def create_app(settings: Settings | None = None) -> FastAPI:
    """The API over the database named in ``settings`` (by default read from the environment)."""
    settings = settings or load_settings()
    app = FastAPI(
        title="autotune",
        version=__version__,
        summary="Submit PyTorch training-speed tuning jobs and read their recommendations.",
        lifespan=_lifespan,
        # The docs pages load their scripts from a CDN; /openapi.json is always served.
        docs_url="/docs" if settings.api_docs else None,
        redoc_url="/redoc" if settings.api_docs else None,
    )
    app.state.settings = settings
    # /readyz's own thread, apart from the pool every sync endpoint queues for.
    app.state.readiness_thread = CapacityLimiter(1)
    app.state.submission_rate = SlidingWindowLimit(settings.submissions_per_minute, 60.0)
    v1 = APIRouter(
        prefix="/v1",
        dependencies=[Depends(require_token)],
        responses={401: {"model": ErrorPublic, "description": "Missing or wrong bearer token."}},
    )
    for module in (jobs, workloads, system, devices):
        v1.include_router(module.router)
    app.include_router(v1)
    app.include_router(ops.router)
    app.include_router(dashboard.router)
    app.add_exception_handler(AutotuneError, _autotune_error)
    app.add_exception_handler(SQLAlchemyError, _database_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    # Innermost: only requests the other limits let through wait for a database connection.
    app.add_middleware(DatabaseAdmission, exempt=ops.PROBES, limit=settings.database_requests)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type"],
        )
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=settings.trusted_hosts())
    if not settings.has_tokens() and not settings.insecure_allow_remote:
        app.add_middleware(LoopbackClientsOnly)  # checked first
    # Outermost: on every answer, refusals included.
    app.add_middleware(SecurityHeaders, docs_paths=[p for p in (app.docs_url, app.redoc_url) if p])
    return app
