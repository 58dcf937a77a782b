"""FastAPI dependencies: settings, database session, workload catalog and the caller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from autotune.service import WorkloadCatalog
from autotune.store import Database

from .auth import Caller, authenticate, require_role
from .settings import Settings


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_database(request: Request) -> Database:
    database: Database = request.app.state.database
    return database


def get_session(database: Annotated[Database, Depends(get_database)]) -> Iterator[Session]:
    """One transaction per request, committed when the endpoint returns without error."""
    with database.session() as session:
        yield session


def get_write_session(database: Annotated[Database, Depends(get_database)]) -> Iterator[Session]:
    """A transaction that reads then writes: on SQLite it takes the write lock up front, since
    a read transaction cannot become a write one once another connection has written."""
    with database.session(immediate=True) as session:
        yield session


def get_catalog(settings: Annotated[Settings, Depends(get_settings)]) -> WorkloadCatalog:
    return WorkloadCatalog(settings.workloads_dir)


SettingsDep = Annotated[Settings, Depends(get_settings)]
DatabaseDep = Annotated[Database, Depends(get_database)]
SessionDep = Annotated[Session, Depends(get_session)]
WriteSessionDep = Annotated[Session, Depends(get_write_session)]
CatalogDep = Annotated[WorkloadCatalog, Depends(get_catalog)]

_bearer = HTTPBearer(
    auto_error=False,
    description="The server's AUTOTUNE_API_TOKEN, or a token of its AUTOTUNE_API_TOKENS_FILE.",
)


def require_token(
    request: Request,
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    """The caller; refused unless it carries a token of the server (when the server has any)."""
    return authenticate(request, settings, credentials.credentials if credentials else None)


CallerDep = Annotated[Caller, Depends(require_token)]


def require_submitter(caller: CallerDep) -> Caller:
    """The caller, refused (403) unless its role may submit jobs."""
    require_role(caller, "submit", "submit jobs")
    return caller


SubmitterDep = Annotated[Caller, Depends(require_submitter)]
