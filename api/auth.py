"""Who is calling and what they may do: bearer tokens with roles, and cross-site writes.

With tokens (``AUTOTUNE_API_TOKEN``, ``AUTOTUNE_API_TOKENS_FILE``), the caller is the token's
holder, with its role. Without, the server answers only its own machine (see
:class:`~autotune_api.limits.LoopbackClientsOnly`) and every caller is the local admin; since a
web page the user visits runs on that machine too, its cross-site writes are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import HTTPException, Request, status

from autotune.service import ROLES, Role, caller_of
from autotune.store import Job

from .settings import Settings

#: The caller of a server without tokens.
LOCAL_NAME = "local"
#: Methods that change something; a cross-site page may not send them to a token-less server.
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: ``Sec-Fetch-Site`` values that mean another site's page sent the request.
_CROSS_SITE = frozenset({"cross-site", "same-site"})


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the token's name (``local`` without tokens) and its role."""

    name: str
    role: Role

    def allows(self, role: Role) -> bool:
        """Whether this caller's role includes ``role``."""
        return ROLES.index(self.role) >= ROLES.index(role)


def authenticate(request: Request, settings: Settings, bearer: str | None) -> Caller:
    """The caller of ``request``, whose bearer token (if any) is ``bearer``.

    Raises:
        HTTPException: 401 for a missing or wrong token; 403 for a cross-site write to a
            server without tokens.
    """
    if not settings.has_tokens():
        refuse_cross_site_write(request, settings)
        return Caller(LOCAL_NAME, "admin")
    token = caller_of(settings.tokens(), bearer) if bearer is not None else None
    if token is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing or wrong bearer token; send the header Authorization: Bearer "
            "<AUTOTUNE_API_TOKEN of the server, or a token of its AUTOTUNE_API_TOKENS_FILE>",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return Caller(token.name, token.role)


def refuse_cross_site_write(request: Request, settings: Settings) -> None:
    """Refuse (403) a write that another site's page sent: by ``Sec-Fetch-Site``, or by an
    ``Origin`` that is neither this server nor one of ``cors_origins``."""
    if request.method not in WRITE_METHODS:
        return
    fetch_site = request.headers.get("sec-fetch-site", "").lower()
    origin = request.headers.get("origin")
    if fetch_site in _CROSS_SITE or (
        origin is not None and not _is_allowed_origin(origin, request, settings)
    ):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"this server has no token, so it refuses writes sent by another site's page "
            f"(Origin {origin or 'unset'}, Sec-Fetch-Site {fetch_site or 'unset'}); send the "
            "request from the server's own page or a command line, or list the origin in "
            "AUTOTUNE_CORS_ORIGINS",
        )


def _is_allowed_origin(origin: str, request: Request, settings: Settings) -> bool:
    if origin.rstrip("/") in settings.cors_origins:
        return True
    try:
        netloc = urlsplit(origin).netloc.lower()
    except ValueError:
        return False
    host = request.headers.get("host", "").lower()
    return bool(netloc) and netloc == host


def require_role(caller: Caller, role: Role, action: str) -> None:
    """Refuse (403) unless ``caller``'s role includes ``role``; ``action`` names what it is."""
    if not caller.allows(role):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"the token {caller.name!r} has the role {caller.role}, which may not {action}; "
            f"ask the server's admin for a token with the role {role}",
        )


def require_may_cancel(caller: Caller, job: Job) -> None:
    """Refuse (403) unless ``caller`` submitted ``job`` or is an admin."""
    require_role(caller, "submit", "cancel jobs")
    if caller.role != "admin" and job.submitted_by != caller.name:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"job {job.id} was submitted by {job.submitted_by or 'someone else'}, so the token "
            f"{caller.name!r} may not cancel it; ask its submitter or an admin",
        )
