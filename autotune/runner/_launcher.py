"""Starting trial processes from a warm fork server, one per job and device.

Starting ``python -m autotune.runner._child`` costs a trial seconds (the interpreter,
``import torch``, autotune, the workload's module) before its first step. A
:class:`TrialLauncher` starts ``python -m autotune.runner._forkserver`` once, which imports all
that without touching the device, and forks each trial from it: every trial is still a fresh
process in its own session, killed with its process group, its output in its own log.

Why not :mod:`multiprocessing`'s ``forkserver`` context: its server is one per Python process,
its preload list is fixed when it first starts, and its environment with it, while a service
runs jobs of different workloads on different GPUs side by side; its children are also
multiprocessing ``Process`` objects, with their own start-up, pickling and exit handling, where
a trial needs its own session, its log on fds 1 and 2 and the death of its worker to kill it.

``AUTOTUNE_TRIAL_START=exec`` turns the server off: every trial then starts as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from typing import IO, Any, Protocol

from autotune.errors import ConfigError
from autotune.runner._environment import trial_environment
from autotune.runner._forkserver import MAX_MESSAGE, SOCKET_FD_ENV, WORKLOAD_ENV, send
from autotune.runner._protocol import RESULT_FD_ENV
from autotune.runner._ranks import RankPlan

#: ``fork`` (the default) or ``exec``: how trial processes start.
START_ENV = "AUTOTUNE_TRIAL_START"
_READY_TIMEOUT_S = 300.0


class TrialProcess(Protocol):
    """What the runner needs of a trial process: a :class:`subprocess.Popen` has it."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...


class ForkedProcess:
    """A trial process forked by the server; its exit status arrives from the server."""

    def __init__(self, pid: int, server_pid: int) -> None:
        self.pid = pid
        #: The fork server: it shares its imported pages with this process.
        self.server_pid = server_pid
        self.returncode: int | None = None
        self._exited = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def _exit(self, returncode: int) -> None:
        self.returncode = returncode
        self._exited.set()

    def wait(self, timeout: float | None = None) -> int | None:
        self._exited.wait(timeout)
        return self.returncode


def fork_server_wanted(environ: Mapping[str, str]) -> str | None:
    """Why trials must start without the fork server here, or None when it may be used."""
    start = environ.get(START_ENV, "fork").strip().lower() or "fork"
    if start not in ("fork", "exec"):
        raise ConfigError(
            f"{START_ENV}={environ[START_ENV]!r} is not a way to start trials; "
            "set it to 'fork' (the default) or 'exec'"
        )
    if start == "exec":
        return f"{START_ENV}=exec"
    if sys.platform != "linux":
        return f"the fork server needs Linux, not {sys.platform}"
    return None


class _Server:
    """One running fork server and the thread that reads what it says."""

    def __init__(self, workload: str, environment: Mapping[str, str]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.output = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        env = dict(
            trial_environment(os.environ),
            PYTHONUNBUFFERED="1",
            **environment,
            **{
                SOCKET_FD_ENV: str(theirs.fileno()),
                WORKLOAD_ENV: workload,
                "AUTOTUNE_TRIAL_PARENT_PID": str(os.getpid()),
            },
        )
        env.pop(RESULT_FD_ENV, None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "autotune.runner._forkserver"],
            stdin=subprocess.DEVNULL,
            stdout=self.output,
            stderr=subprocess.STDOUT,
            pass_fds=(theirs.fileno(),),
            env=env,
            start_new_session=True,
        )
        theirs.close()
        self.sock = ours
        self.children: dict[int, ForkedProcess] = {}
        self._replies: list[dict[str, Any]] = []
        self._lock = threading.Condition()
        self._closed = False
        self.unusable = self._wait_ready()
        if self.unusable is None:
            threading.Thread(target=self._read, name="fork-server", daemon=True).start()

    def _receive(self) -> dict[str, Any] | None:
        try:
            data = self.sock.recv(MAX_MESSAGE)
        except OSError:
            return None
        return json.loads(data) if data else None

    def _wait_ready(self) -> str | None:
        self.sock.settimeout(_READY_TIMEOUT_S)
        try:
            message = self._receive()
        except TimeoutError:
            message = None
        self.sock.settimeout(None)
        if message is None:
            self.process.kill()
            self.process.wait()
            return f"the fork server did not start: {self._output_tail()}"
        return None if message.get("ready") else str(message.get("reason"))

    def _output_tail(self) -> str:
        self.output.seek(0)
        lines = [
            line
            for line in self.output.read().decode(errors="replace").splitlines()
            if line.strip()
        ]
        return lines[-1].strip() if lines else f"it exited with code {self.process.poll()}"

    def _read(self) -> None:
        """Handle what the server says, in its order. A forked child is registered here, on
        reading its ``forked`` reply, not by :meth:`fork` once it wakes: the server can report
        the child's exit right behind that reply (a trial that ended while this process was
        stopped or starved), and that report must find the child."""
        while (message := self._receive()) is not None:
            with self._lock:
                if "exited" in message:
                    child = self.children.pop(int(message["exited"]), None)
                    if child is not None:
                        child._exit(int(message["returncode"]))
                elif "forked" in message:
                    child = ForkedProcess(int(message["forked"]), self.process.pid)
                    self.children[child.pid] = child
                    self._replies.append({**message, "child": child})
                else:
                    self._replies.append(message)
                self._lock.notify_all()
        # The server is gone, and its trials with it (their parent-death signal is SIGKILL).
        with self._lock:
            self._closed = True
            for child in self.children.values():
                child._exit(-9)
            self.children.clear()
            self._lock.notify_all()

    @property
    def alive(self) -> bool:
        return not self._closed and self.process.poll() is None

    def fork(self, message: dict[str, Any], fds: list[int]) -> ForkedProcess | None:
        with self._lock:
            try:
                send(self.sock, message, fds)
            except OSError:
                return None
            while not self._replies and not self._closed:
                self._lock.wait()
            if not self._replies:
                return None
            reply = self._replies.pop(0)
            child: ForkedProcess | None = reply.get("child")
            return child

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.output.close()


_active = threading.local()


class TrialLauncher:
    """Starts the probe and the trials of one job on one device from one warm fork server.

    Used as a context manager, it is what :func:`run_trial` and :func:`probe_workload` use in
    this thread for its ``device``; the server starts at the first trial and stops on exit.
    Its ``ranks`` say how many DDP ranks each trial runs as and how the host is shared (see
    :mod:`autotune.runner._ranks`).
    When it cannot be used (see :attr:`unavailable`) trials start as fresh interpreters.

    Example:
        >>> with TrialLauncher("builtin:tiny-mlp", "cpu"):  # doctest: +SKIP
        ...     probe = probe_workload("builtin:tiny-mlp", "cpu")
    """

    def __init__(self, workload: str, device: str, ranks: RankPlan | None = None) -> None:
        self.workload = workload
        self.device = device
        self.ranks = ranks or RankPlan()
        #: Why trials start without the server (None while it may be used).
        self.unavailable: str | None = None
        self._server: _Server | None = None
        self._previous: TrialLauncher | None = None
        self._lock = threading.Lock()

    @property
    def server_pid(self) -> int | None:
        """The fork server's pid, once started."""
        return self._server.process.pid if self._server is not None else None

    def fork(
        self,
        request: dict[str, Any],
        environment: Mapping[str, str],
        log: IO[bytes],
        result_fd: int,
    ) -> ForkedProcess | None:
        """Fork a trial process for ``request``; None when it must start the old way."""
        with self._lock:
            if self.unavailable is None:
                self.unavailable = fork_server_wanted(os.environ)
            if self.unavailable is not None:
                return None
            if self._server is not None and not self._server.alive:
                self._server.close()
                self._server = None  # killed since the last trial: start another
            if self._server is None:
                self._server = _Server(self.workload, environment)
                self.unavailable = self._server.unusable
                if self.unavailable is not None:
                    self._server.close()
                    self._server = None
                    return None
            server = self._server
        message = {"fork": request, "environment": dict(environment)}
        return server.fork(message, [log.fileno(), result_fd])

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.close()
                self._server = None

    def __enter__(self) -> TrialLauncher:
        self._previous = getattr(_active, "launcher", None)
        _active.launcher = self
        return self

    def __exit__(self, *_: object) -> None:
        _active.launcher = self._previous
        self.close()


def active_launcher(device: str) -> TrialLauncher | None:
    """The launcher this thread entered for ``device``, if any."""
    launcher: TrialLauncher | None = getattr(_active, "launcher", None)
    return launcher if launcher is not None and launcher.device == device else None


def active_ranks() -> RankPlan:
    """The ranks and host share of this thread's launcher (one rank, the whole host, without)."""
    launcher: TrialLauncher | None = getattr(_active, "launcher", None)
    return launcher.ranks if launcher is not None else RankPlan()
