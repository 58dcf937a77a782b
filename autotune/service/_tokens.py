"""The service's API tokens: named, with a role, stored as sha256 hashes in a tokens file.

A tokens file has one token a line, ``NAME ROLE SHA256-HEX`` (``alice submit <64 hex digits>``);
blank lines and lines starting with ``#`` are skipped. ``autotune token new NAME`` prints a
fresh token once, with the line to add. Only the hash is stored, so reading the file does not
reveal a token.

Example:
    >>> token = "a-long-and-random-example-token"
    >>> tokens = parse_tokens(f"alice submit {hash_token(token)}", "tokens.txt")
    >>> caller_of(tokens, token)
    ApiToken(name='alice', role='submit', sha256='...')
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from autotune.errors import ConfigError

Role = Literal["read", "submit", "admin"]

#: Each role may do what the ones before it may: read the jobs; submit and cancel one's own;
#: everything, including cancelling anyone's job.
ROLES: tuple[Role, ...] = ("read", "submit", "admin")
_ROLE_OF: dict[str, Role] = {role: role for role in ROLES}

MIN_TOKEN_CHARS = 16
#: Fewer distinct characters than this is a pattern (``aaaa...``, ``abab...``), not a secret.
MIN_DISTINCT_CHARS = 10
_NAME = re.compile(r"[A-Za-z0-9_.@+-]{1,64}")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ApiToken:
    """One token of a tokens file: who holds it, what they may do, and its hash."""

    name: str
    role: Role
    sha256: str

    def __repr__(self) -> str:
        return f"ApiToken(name={self.name!r}, role={self.role!r}, sha256='...')"


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """The sha256 hex digest a tokens file stores for ``token``."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_weakness(token: str) -> str | None:
    """Why ``token`` is too easy to guess, as a clause; ``None`` when it is strong enough."""
    if len(token) < MIN_TOKEN_CHARS:
        return f"is shorter than {MIN_TOKEN_CHARS} characters"
    if any(char.isspace() for char in token):
        return "contains whitespace"
    if len(set(token)) < MIN_DISTINCT_CHARS:
        return f"has fewer than {MIN_DISTINCT_CHARS} distinct characters"
    return None


def check_token_name(name: str) -> str:
    """``name`` if it can name a token; raises :class:`ConfigError` otherwise."""
    if not _NAME.fullmatch(name):
        raise ConfigError(
            f"token name {name!r} is not 1 to 64 letters, digits or _.@+-; choose a name such "
            "as alice or ci-bot"
        )
    return name


def token_line(name: str, role: Role, token: str) -> str:
    """The tokens file's line for ``token``."""
    return f"{check_token_name(name)} {role} {hash_token(token)}"


def parse_tokens(text: str, source: str) -> list[ApiToken]:
    """The tokens of a tokens file's ``text``; ``source`` names it in errors.

    Raises:
        ConfigError: a line is not ``NAME ROLE SHA256-HEX``, holds a plaintext token instead
            of its hash, names an unknown role, or repeats a name.
    """
    tokens: list[ApiToken] = []
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        where = f"{source} line {number}"
        if len(fields) != 3:
            raise ConfigError(
                f"{where} has {len(fields)} fields, not NAME ROLE SHA256-HEX; print a valid "
                "line with `autotune token new NAME --role ROLE`"
            )
        name, role_name, digest = fields
        if not _NAME.fullmatch(name):
            raise ConfigError(
                f"{where} names a token {name!r}, not 1 to 64 letters, digits or _.@+-; rename it"
            )
        role = _ROLE_OF.get(role_name)
        if role is None:
            raise ConfigError(
                f"{where} gives the role {role_name!r}; use one of {', '.join(ROLES)}"
            )
        if not _SHA256_HEX.fullmatch(digest):
            raise ConfigError(
                f"{where} does not hold a sha256 hex digest (a plaintext token?); store only "
                "the hash, as `autotune token new NAME --role ROLE` prints it"
            )
        if any(token.name == name for token in tokens):
            raise ConfigError(f"{where} repeats the token name {name!r}; give each token its own")
        tokens.append(ApiToken(name, role, digest))
    return tokens


def read_tokens_file(path: Path) -> list[ApiToken]:
    """The tokens in the file at ``path`` (see :func:`parse_tokens`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot read the tokens file {str(path)!r} ({exc}); check AUTOTUNE_API_TOKENS_FILE"
        ) from None
    return parse_tokens(text, str(path))


def caller_of(tokens: list[ApiToken], given: str) -> ApiToken | None:
    """The token whose hash is the hash of ``given``, or ``None``.

    Every hash is compared in constant time, and all of them are, so that the time taken says
    nothing about which token (or how much of one) matched.
    """
    digest = hash_token(given).encode()
    found = None
    for token in tokens:
        if hmac.compare_digest(digest, token.sha256.encode()):
            found = token
    return found
