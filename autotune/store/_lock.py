"""One trial at a time per device: a host-wide lock per (host, device), whoever runs trials.

A lock file under :func:`lock_dir` (``fcntl.flock``) serializes every process on this host;
with a PostgreSQL database an advisory lock keyed by host and device is taken as well, so
that workers sharing the database see each other even when they do not share a filesystem
(containers on one machine with the same ``hostname``). Both are released by the kernel or
the server when the holder dies, so a killed process never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

from sqlalchemy import text

from autotune.store._db import Database

LOCK_DIR_ENV = "AUTOTUNE_LOCK_DIR"
_POLL_S = 0.1


def lock_dir() -> Path:
    """``$AUTOTUNE_LOCK_DIR``, else ``autotune-locks`` in the system's temporary directory.

    Shared by every user of the host (mode 1777, like ``/tmp``): a GPU is one whatever user
    runs on it.
    """
    directory = Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir(), "autotune-locks"))
    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(PermissionError):  # created by another user in between
            directory.chmod(0o1777)
    return directory


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".lock"


def _open_lock_file(name: str) -> IO[bytes]:
    path = lock_dir() / _file_name(name)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    return os.fdopen(descriptor, "r+b")


def try_file_lock(name: str) -> IO[bytes] | None:
    """Take the lock ``name`` on this host without waiting; the open file holds it (or None).

    Closing the file (or the process ending) releases it.
    """
    handle = _open_lock_file(name)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _wait(take: Callable[[], bool], cancel: threading.Event | None) -> bool:
    """Call ``take()`` until it succeeds (True) or ``cancel`` is set (False)."""
    cancel = cancel or threading.Event()
    while not take():
        if cancel.wait(_POLL_S):
            return False
    return True


def _advisory_key(host: str, device: str) -> int:
    digest = hashlib.blake2b(f"autotune-device:{host}:{device}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@contextmanager
def device_lock(
    db: Database | None, device: str, cancel: threading.Event | None = None
) -> Iterator[bool]:
    """Hold the device ``device`` of this host (``cpu``, ``cuda:GPU-UUID``; ``cuda:INDEX``
    without NVML).

    Waits while another process holds it. Yields True once held, or False when ``cancel``
    was set while waiting (the caller must then not run its trial).

    Example:
        >>> with device_lock(None, "cpu") as held:
        ...     held
        True
    """
    with ExitStack() as stack:
        handle = stack.enter_context(_open_lock_file(f"device-{device}"))

        def take_file() -> bool:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        if not _wait(take_file, cancel):
            yield False
            return
        if db is not None and not db.is_sqlite:
            # Its own connection, closed (not returned to the pool) at the end whatever
            # happened: ending the session is what surely releases its advisory lock, even
            # after an error between taking the lock and unlocking it.
            connection = stack.enter_context(db.engine.connect())
            stack.callback(connection.invalidate)
            key = _advisory_key(socket.gethostname(), device)

            def take_advisory() -> bool:
                taken = connection.execute(
                    text("SELECT pg_try_advisory_lock(:key)"), {"key": key}
                ).scalar()
                connection.commit()
                return bool(taken)

            if not _wait(take_advisory, cancel):
                yield False
                return
        yield True


def embedded_worker_slot(db_url: str, device: str) -> str:
    """The name of the lock that one server process per (database, device) holds to run the
    embedded worker (see :func:`try_file_lock`)."""
    digest = hashlib.blake2b(db_url.encode(), digest_size=6).hexdigest()
    return f"embedded-worker-{digest}-{device}"
