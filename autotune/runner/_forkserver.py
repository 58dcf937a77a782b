"""The warm parent of trial processes: ``python -m autotune.runner._forkserver``.

It imports torch, autotune's measuring code and the workload's module once, initialises
nothing on any device, and then forks one fresh process per request. The server never runs a
trial's code itself, so every trial starts from the same state: what one trial sets (cuDNN
flags, thread counts, the RNG, the workload module's globals) dies with its process.

Messages travel on a ``SOCK_SEQPACKET`` Unix socket the launcher hands down (one JSON object
per packet; a fork request carries the trial's log and result pipe as file descriptors):

* server -> launcher, once: ``{"ready": true}`` or ``{"ready": false, "reason": "..."}``;
* launcher -> server: ``{"fork": REQUEST, "environment": {...}}`` with ``[log_fd, result_fd]``;
* server -> launcher: ``{"forked": PID}`` and, when that process ends, ``{"exited": PID,
  "returncode": RC}`` (negative for a signal, as :class:`subprocess.Popen` has it).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import threading
from typing import Any

SOCKET_FD_ENV = "AUTOTUNE_FORKSERVER_FD"
#: The workload reference whose module the server imports before it says it is ready.
WORKLOAD_ENV = "AUTOTUNE_FORKSERVER_WORKLOAD"
MAX_MESSAGE = 1 << 20


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    socket.send_fds(sock, [json.dumps(message).encode()], fds or [])


def _preload(workload: str) -> str | None:
    """Import what every trial needs; the reason the server cannot be used, or None."""
    import torch

    # Building any torch.optim optimizer imports torch._dynamo on first use (its __init__ is
    # wrapped by torch._disable_dynamo), seconds that every forked trial would pay again.
    # Importing it here touches no device and starts no thread.
    import torch._dynamo  # noqa: F401

    import autotune.runner._child  # noqa: F401 - autotune.measure, the loop, the protocol
    from autotune.errors import AutotuneError
    from autotune.workload import preload_workload

    try:
        preload_workload(workload)
    except AutotuneError as exc:
        return f"the workload's module cannot be imported here ({exc})"
    if torch.cuda.is_initialized():
        return (
            "importing the workload's module initialised CUDA, which a forked process "
            "cannot use; move device work from import time into the workload's factories"
        )
    if threading.active_count() > 1:
        return (
            "importing the workload's module started threads, which a forked process "
            "would lack; start them in the workload's factories instead"
        )
    return None


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        send(sock, {"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})


def _fork(
    sock: socket.socket, wakeup: tuple[int, int], message: dict[str, Any], fds: list[int]
) -> int:
    """Fork one trial process; return its pid once it leads its own session."""
    log_fd, result_fd = fds
    sync_read, sync_write = os.pipe()
    server_pid = os.getpid()
    pid = os.fork()
    if pid == 0:  # the trial process
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (*wakeup, sync_read, sock.fileno()):
                os.close(fd)
            # Its own session and process group, so that kill_group reaches its workers; the
            # server answers with the pid only after this, so a kill never misses the group.
            os.setsid()
            os.close(sync_write)
            os.environ.update(message.get("environment") or {})
            from autotune.runner._child import run_forked

            run_forked(message["fork"], log_fd, result_fd, server_pid)
        finally:
            os._exit(70)
    os.close(sync_write)
    os.read(sync_read, 1)  # EOF once the child has called setsid (or died)
    os.close(sync_read)
    for fd in fds:
        os.close(fd)
    return pid


def serve(sock: socket.socket) -> None:
    """Fork a trial for each request until the launcher closes the socket."""
    wakeup = os.pipe()
    os.set_blocking(wakeup[1], False)
    signal.set_wakeup_fd(wakeup[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        ready, _, _ = select.select([sock.fileno(), wakeup[0]], [], [])
        if wakeup[0] in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wakeup[0], 4096)
            _reap(sock)
        if sock.fileno() in ready:
            data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 4)
            if not data:
                return  # the launcher closed: trials still running die with this process
            message = json.loads(data)
            if len(fds) != 2:
                for fd in fds:
                    os.close(fd)
                send(sock, {"failed": f"a fork request needs 2 descriptors, got {len(fds)}"})
                continue
            send(sock, {"forked": _fork(sock, wakeup, message, fds)})
            _reap(sock)


def main() -> None:
    from autotune.runner._child import die_with_parent

    die_with_parent()  # a SIGKILLed worker takes its server, and so its trials, with it
    sock = socket.socket(fileno=int(os.environ.pop(SOCKET_FD_ENV)))
    reason = _preload(os.environ.pop(WORKLOAD_ENV, ""))
    sys.stdout.flush()
    sys.stderr.flush()
    send(sock, {"ready": reason is None, "reason": reason})
    if reason is None:
        serve(sock)
    os._exit(0)


if __name__ == "__main__":
    main()
