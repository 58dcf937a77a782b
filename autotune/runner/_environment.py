"""The environment a trial process (and its fork server) starts with: this process's, less its
credentials.

Trials run the user's training code, which may need any variable the user set (``CUDA_*``,
``NCCL_*``, ``HF_HOME``, proxies, dataset paths), so an allow-list could not foresee what a
workload needs: the environment is passed on less a deny-list of what only the service needs,
its API tokens and the database's URL and password, by name and by value.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping

from sqlalchemy import make_url
from sqlalchemy.exc import ArgumentError

#: Variables the service reads and a trial never needs: the database's URL and its token files.
WITHHELD_NAMES = frozenset(
    {"AUTOTUNE_DB", "AUTOTUNE_API_TOKENS_FILE", "DATABASE_URL", "PGPASSFILE", "PGSERVICEFILE"}
)
#: Names that say a variable holds a credential.
_CREDENTIAL_NAME = re.compile(r"TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIAL", re.IGNORECASE)
#: Variables whose value is a database URL, whose password is then withheld wherever it occurs.
_DATABASE_URL_NAMES = ("AUTOTUNE_DB", "DATABASE_URL")

_withheld_values: set[str] = set()
_withheld_lock = threading.Lock()


def withhold_from_trials(secret: str | None) -> None:
    """Keep out of every trial's environment any variable whose value contains ``secret``
    (the password of a database named on the command line rather than in the environment)."""
    if secret:
        with _withheld_lock:
            _withheld_values.add(secret)


def _password(url: str) -> str | None:
    try:
        return make_url(url).password
    except (ArgumentError, ValueError):
        return None


def trial_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without API tokens, passwords, secrets, the database URL and any value
    containing the database's password.

    Example:
        >>> sorted(trial_environment({"HOME": "/root", "AUTOTUNE_API_TOKEN": "x" * 32}))
        ['HOME']
    """
    with _withheld_lock:
        secrets = set(_withheld_values)
    secrets.update(p for name in _DATABASE_URL_NAMES if (p := _password(environ.get(name, ""))))
    return {
        name: value
        for name, value in environ.items()
        if name not in WITHHELD_NAMES
        and not _CREDENTIAL_NAME.search(name)
        and not any(secret in value for secret in secrets)
    }
