"""One trial at a time per device: a host-wide lock per (host, device), whoever runs trials.

A trial of several ranks holds the lock of each of its devices, taken in a fixed order.

A lock file under :func:`lock_dir` (``fcntl.flock``) serializes every process on this host;
with a PostgreSQL database an advisory lock keyed by host and device is taken as well, so
that workers sharing the database see each other even when they do not share a filesystem
(containers on one machine with the same ``hostname``). Both are released by the kernel or
the server when the holder dies, so a killed process never leaves a stale lock behind.

The lock directory is private to the user (mode 0700, lock files 0600): a lock file anyone can
open is a lock anyone can hold, keeping every trial on the device waiting. Users of one host
therefore do not see each other's file locks; workers sharing a PostgreSQL database still see
each other through the advisory lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import socket
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

from sqlalchemy import text

from autotune.errors import ConfigError
from autotune.store._db import Database

LOCK_DIR_ENV = "AUTOTUNE_LOCK_DIR"
_POLL_S = 0.1


def lock_dir() -> Path:
    """``$AUTOTUNE_LOCK_DIR``, else ``autotune-locks-<uid>`` in the system's temporary directory.

    Created with mode 0700; one owned by another user, or writable by its group or others, is
    refused. Not under ``$XDG_RUNTIME_DIR``: a login shell has it and a system service does
    not, and two processes of one user must find the same directory to see each other's locks.
    """
    explicit = os.environ.get(LOCK_DIR_ENV)
    default = Path(tempfile.gettempdir(), f"autotune-locks-{os.getuid()}")
    directory = Path(explicit) if explicit else default
    try:
        directory.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass  # checked below, whatever it is
    except OSError as exc:
        raise ConfigError(
            f"cannot create the lock directory {str(directory)!r} ({exc.strerror}); point "
            f"{LOCK_DIR_ENV} at a directory this user can write"
        ) from None
    # The default's name is predictable in a shared /tmp: a link planted there is not ours.
    info = directory.stat() if explicit else directory.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise ConfigError(
            f"the lock directory {str(directory)!r} is not a directory private to this user "
            f"(uid {os.getuid()}, not writable by group or others), so another user could hold "
            f"a device lock; remove it or point {LOCK_DIR_ENV} at a directory of your own with "
            "mode 0700"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(
            f"the lock directory {str(directory)!r} is not writable by this user; make it "
            f"writable (chmod 700) or point {LOCK_DIR_ENV} at a directory this user can write"
        )
    return directory


def _file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) + ".lock"


def _open_lock_file(name: str) -> IO[bytes]:
    path = lock_dir() / _file_name(name)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    with contextlib.suppress(PermissionError):  # one left by an earlier version: make it ours
        os.fchmod(descriptor, 0o600)
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


@contextmanager
def device_locks(
    db: Database | None, devices: Iterable[str], cancel: threading.Event | None = None
) -> Iterator[bool]:
    """Hold every device of ``devices`` (a trial of several ranks, one GPU each), as
    :func:`device_lock` holds one.

    They are taken one by one in sorted order, whatever order ``devices`` lists them in: two
    processes that want overlapping sets then wait for the same first device they share, and
    never each hold one that the other waits for. Yields False (holding none) when ``cancel``
    is set while waiting.

    Example:
        >>> with device_locks(None, ["cuda:GPU-b", "cuda:GPU-a"]) as held:
        ...     held
        True
    """
    with ExitStack() as stack:
        for device in sorted(set(devices)):
            if not stack.enter_context(device_lock(db, device, cancel)):
                yield False
                return
        yield True


def embedded_worker_slot(db_url: str, device: str) -> str:
    """The name of the lock that one server process per (database, device) holds to run the
    embedded worker (see :func:`try_file_lock`)."""
    digest = hashlib.blake2b(db_url.encode(), digest_size=6).hexdigest()
    return f"embedded-worker-{digest}-{device}"
