"""The service's settings, read from ``AUTOTUNE_*`` environment variables (or passed in)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from autotune.errors import ConfigError, first_validation_error
from autotune.service import ApiToken, hash_token, read_tokens_file, token_weakness
from autotune.store import resolve_url

#: The name the single ``AUTOTUNE_API_TOKEN`` (an admin token) goes by as a job's submitter.
ADMIN_TOKEN_NAME = "admin"


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Settings(BaseSettings):
    """Everything the API process needs; unsafe combinations are refused when it is built.

    Example:
        >>> Settings(db="sqlite:///jobs.db", embedded_worker=False).host
        '127.0.0.1'
    """

    model_config = SettingsConfigDict(env_prefix="AUTOTUNE_", extra="ignore")

    #: Database URL or SQLite file; the same ``AUTOTUNE_DB`` the CLI reads.
    db: str = Field(default_factory=lambda: resolve_url(None))
    #: With a token, every /v1 request needs ``Authorization: Bearer <token>``.
    api_token: SecretStr | None = None
    #: A file of named tokens with roles, one ``NAME ROLE SHA256-HEX`` a line (``autotune token
    #: new`` prints them); with it, too, every /v1 request needs a bearer token.
    api_tokens_file: Path | None = None
    #: A directory of workload files (``NAME.py`` is submitted as ``NAME``).
    workloads_dir: Path | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    #: Serve on a non-loopback address without a token (anyone reaching it can run jobs).
    insecure_allow_remote: bool = False
    max_body_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 2**20)
    #: Run a worker inside the API process (``autotune serve``'s default).
    embedded_worker: bool = True
    #: A running job whose heartbeat is older than this is taken over by another worker.
    heartbeat_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    heartbeat_interval_s: float = Field(default=5.0, gt=0, le=600)
    max_attempts: int = Field(default=3, ge=1, le=100)
    #: The device the embedded worker owns; jobs asking for ``auto`` run on it.
    device: str = "auto"
    #: Host names the server answers to (the ``Host`` header), against DNS rebinding. By
    #: default: the loopback names without a token, any name with one (a rebinding page
    #: cannot send the token).
    allowed_hosts: list[str] | None = None
    #: Origins whose pages may call the API from a browser; none unless set.
    cors_origins: list[str] = Field(default_factory=list)
    #: Queued jobs past which a submission is answered 429 until workers catch up.
    max_queued_jobs: int = Field(default=100, ge=1)
    #: Submissions (``POST /v1/jobs``) one client address may make in any 60 seconds.
    submissions_per_minute: int = Field(default=30, ge=1)
    #: The time budget of a submitted job that names none, so that no job runs unbounded.
    default_time_budget_s: float = Field(default=3600.0, gt=0)
    #: The largest time budget a submission may ask for.
    max_time_budget_s: float = Field(default=24 * 3600.0, gt=0)
    #: The most trials a submission may ask for.
    max_trials: int = Field(default=500, ge=1)
    #: Connections and requests uvicorn serves at once (``autotune serve``); past it, 503.
    limit_concurrency: int = Field(default=64, ge=1)
    #: Requests that may use the database at once (at most the pool's connections); the others
    #: wait their turn on the event loop. More threads running Python at once only contend for
    #: the interpreter's lock, and the event loop (the probes) waits behind each of them.
    database_requests: int = Field(default=4, ge=1, le=1000)
    #: Serve the interactive API docs at /docs and /redoc (their scripts come from a CDN).
    api_docs: bool = False

    _tokens: list[ApiToken] = PrivateAttr(default_factory=list)

    def has_tokens(self) -> bool:
        """Whether requests need a bearer token (``api_token`` or ``api_tokens_file``)."""
        return self.api_token is not None or self.api_tokens_file is not None

    def tokens(self) -> list[ApiToken]:
        """The tokens the server accepts: the tokens file's, and ``api_token`` as an admin's."""
        return self._tokens

    def trusted_hosts(self) -> list[str]:
        """The ``Host`` names to answer (see ``allowed_hosts``)."""
        if self.allowed_hosts is not None:
            return self.allowed_hosts
        if self.has_tokens() or self.insecure_allow_remote:
            return ["*"]
        return sorted({"localhost", "127.0.0.1", "[::1]", self.host})

    @field_validator("db")
    @classmethod
    def _db_is_url(cls, value: str) -> str:
        return resolve_url(value)

    @field_validator("api_token")
    @classmethod
    def _token_is_strong(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value():
            return None
        weakness = token_weakness(value.get_secret_value())
        if weakness is not None:
            raise ValueError(
                f"AUTOTUNE_API_TOKEN {weakness}; use a random one, e.g. from "
                "`python -c 'import secrets; print(secrets.token_urlsafe())'`"
            )
        return value

    @field_validator("workloads_dir")
    @classmethod
    def _dir_exists(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_dir():
            raise ValueError(
                f"workloads directory {str(value)!r} does not exist; create it or "
                "point AUTOTUNE_WORKLOADS_DIR at one"
            )
        return value.resolve() if value is not None else None

    @model_validator(mode="after")
    def _safe(self) -> Settings:
        if not is_loopback(self.host) and not self.has_tokens() and not self.insecure_allow_remote:
            raise ValueError(
                f"refusing to serve on {self.host} without AUTOTUNE_API_TOKEN, since anyone who "
                "reaches it could run jobs; set AUTOTUNE_API_TOKEN or pass --insecure-allow-remote"
            )
        if self.heartbeat_interval_s * 2 > self.heartbeat_timeout_s:
            raise ValueError(
                f"the heartbeat interval ({self.heartbeat_interval_s:g} s) must be at most half "
                f"the heartbeat timeout ({self.heartbeat_timeout_s:g} s); lower the interval"
            )
        if self.default_time_budget_s > self.max_time_budget_s:
            raise ValueError(
                f"the default time budget ({self.default_time_budget_s:g} s) is larger than the "
                f"maximum ({self.max_time_budget_s:g} s); lower AUTOTUNE_DEFAULT_TIME_BUDGET_S "
                "or raise AUTOTUNE_MAX_TIME_BUDGET_S"
            )
        self._tokens = self._read_tokens()
        return self

    def _read_tokens(self) -> list[ApiToken]:
        tokens = read_tokens_file(self.api_tokens_file) if self.api_tokens_file else []
        if self.api_tokens_file and not tokens:
            raise ValueError(
                f"the tokens file {str(self.api_tokens_file)!r} holds no token; add a line "
                "printed by `autotune token new NAME --role ROLE`"
            )
        if self.api_token is None:
            return tokens
        if any(token.name == ADMIN_TOKEN_NAME for token in tokens):
            raise ValueError(
                f"the tokens file names a token {ADMIN_TOKEN_NAME!r}, the name AUTOTUNE_API_TOKEN "
                "goes by; rename that token"
            )
        admin = ApiToken(ADMIN_TOKEN_NAME, "admin", hash_token(self.api_token.get_secret_value()))
        return [*tokens, admin]


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment and ``overrides``; an invalid one is a :class:`ConfigError`."""
    values = {name: value for name, value in overrides.items() if value is not None}
    try:
        return Settings(**values)
    except ValidationError as exc:
        where, message = first_validation_error(exc)
        raise ConfigError(f"{where}: {message}" if where else message) from None
