"""CPU seconds of this process and of its children, read finer than the kernel's ticks.

The step sweep reads how many cores a step kept busy and the loader sweep what CPU a sample
costs its workers; both read the CPU time of short windows, which the per-process times that
count in ticks of 10 ms would blur.
"""

from __future__ import annotations

import contextlib
import os
import time

import psutil

from autotune.measure.profiling._lockstep import other_ranks

#: Where each thread's time on a CPU is counted in nanoseconds (Linux).
_SCHEDSTAT = os.path.exists("/proc/self/schedstat")


def _cpu_seconds(process: psutil.Process, children: bool = False) -> float:
    """CPU seconds, user and system, of this process's threads (``process`` is this process)
    and, with ``children``, of its live children's threads.

    Read in nanoseconds: the kernel's user and system times per process (``psutil``'s
    ``cpu_times``) count in ticks of 10 ms, and each loader worker and the main process lose
    up to a tick in a window of half a second, enough to blur a loader's CPU per sample
    (evidence: benchmarks/log/).
    """
    total = time.process_time()
    if children:
        for child in own_descendants(process):
            total += _child_cpu_seconds(child)
    return total


def own_descendants(process: psutil.Process) -> list[psutil.Process]:
    """``process``'s descendants but the other ranks of a profile and theirs (see
    :mod:`._lockstep`): one rank's loader workers."""
    ranks = other_ranks()
    found: list[psutil.Process] = []
    for child in process.children():
        if child.pid in ranks:
            continue
        found.append(child)
        with contextlib.suppress(psutil.Error):
            found.extend(child.children(recursive=True))
    return found


def _child_cpu_seconds(child: psutil.Process) -> float:
    """CPU seconds of another process's live threads (0 for one that has exited): each
    thread's time on a CPU from its ``schedstat``, else the process's times in ticks."""
    if not _SCHEDSTAT:
        with contextlib.suppress(psutil.Error):
            times = child.cpu_times()
            return float(times.user + times.system)
        return 0.0
    nanoseconds = 0
    try:
        threads = os.listdir(f"/proc/{child.pid}/task")
    except OSError:
        return 0.0
    for thread in threads:
        with (
            contextlib.suppress(OSError, ValueError, IndexError),
            open(f"/proc/{child.pid}/task/{thread}/schedstat") as stat,
        ):
            nanoseconds += int(stat.read().split()[0])
    return nanoseconds / 1e9
