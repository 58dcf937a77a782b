"""The kernel's count of out-of-memory kills in a process's memory cgroup.

The kernel's OOM killer ends a process with SIGKILL, which looks like any other kill; the
cgroup's counter (cgroup v2 ``memory.events``, v1 ``memory.oom_control``) says it was memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_ROOT = Path("/sys/fs/cgroup")


def _counter_files(proc_cgroup: str) -> list[tuple[Path, str]]:
    """Candidate counter files for the cgroups listed in a ``/proc/PID/cgroup`` text."""
    files = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        relative = path.lstrip("/")
        if controllers == "":  # cgroup v2 (unified)
            for mount in (_ROOT, _ROOT / "unified"):
                files.append((mount / relative / "memory.events", "oom_kill"))
        elif "memory" in controllers.split(","):
            files.append((_ROOT / "memory" / relative / "memory.oom_control", "oom_kill"))
    return files


def _read_counter(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


@dataclass(frozen=True)
class OomKillCounter:
    """Reads the OOM-kill counter of one memory cgroup; ``read()`` is None where none is."""

    path: Path | None
    key: str = "oom_kill"

    @classmethod
    def of_process(cls, pid: int) -> OomKillCounter:
        try:
            text = Path(f"/proc/{pid}/cgroup").read_text()
        except OSError:
            return cls(None)
        for path, key in _counter_files(text):
            if _read_counter(path, key) is not None:
                return cls(path, key)
        return cls(None)

    @classmethod
    def of_this_process(cls) -> OomKillCounter:
        """The counter of this process's cgroup, which the trial processes it starts inherit."""
        return cls.of_process(os.getpid())

    def read(self) -> int | None:
        return None if self.path is None else _read_counter(self.path, self.key)
