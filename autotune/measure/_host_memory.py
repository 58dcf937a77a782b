"""Host memory of a whole process tree, sampled from outside while a trial runs."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

import psutil

#: The sampler may spend at most this share of its thread's time reading memory; reading PSS
#: walks every page table of every process (tens of ms for a few torch processes), and on a
#: small machine an eager sampler would slow the very trial it measures.
MAX_SAMPLING_SHARE = 0.1
MIN_INTERVAL_S = 0.05


def process_pss_bytes(pid: int) -> int:
    """Proportional set size of one process (shared pages split between their users).

    Read from ``/proc/PID/smaps_rollup``; falls back to RSS where that file does not exist.
    """
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return 0


def tree_memory_bytes(root_pid: int) -> int:
    """PSS summed over a process and its descendants.

    PSS splits each shared page between the processes mapping it, so DataLoader workers that
    share the parent's pages after ``fork`` are not counted twice.
    """
    try:
        root = psutil.Process(root_pid)
        pids = [root_pid, *(child.pid for child in root.children(recursive=True))]
    except psutil.Error:
        return 0
    return sum(process_pss_bytes(pid) for pid in pids)


class TreeMemorySampler:
    """Samples :func:`tree_memory_bytes` in a thread; keeps the peak; can enforce a budget.

    The thread runs at the lowest priority and waits between samples ten times as long as a
    sample takes, so it costs the measured trial at most ~10% of one core.
    """

    def __init__(
        self,
        root_pid: int,
        budget_bytes: int | None = None,
        on_over_budget: Callable[[int], None] | None = None,
        extra_sample: Callable[[], None] | None = None,
    ) -> None:
        self.root_pid = root_pid
        self.budget_bytes = budget_bytes
        self.on_over_budget = on_over_budget
        self.extra_sample = extra_sample
        self.peak_bytes = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-memory", daemon=True)

    def _run(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        while not self._stop.is_set():
            started = time.perf_counter()
            used = tree_memory_bytes(self.root_pid)
            self.samples += 1
            self.peak_bytes = max(self.peak_bytes, used)
            if self.extra_sample is not None:
                self.extra_sample()
            if self.budget_bytes is not None and used > self.budget_bytes \
                    and self.on_over_budget is not None:
                self.on_over_budget(used)
                return
            cost = time.perf_counter() - started
            self._stop.wait(max(MIN_INTERVAL_S, cost / MAX_SAMPLING_SHARE))

    def __enter__(self) -> TreeMemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
