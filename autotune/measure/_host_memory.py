"""Host memory of a whole process tree, sampled from outside while a trial runs."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psutil


def tree_memory_bytes(root_pid: int) -> int:
    """Proportional set size (PSS) summed over a process and its descendants.

    PSS splits each shared page between the processes mapping it, so DataLoader workers that
    share the parent's pages after ``fork`` are not counted twice. Falls back to RSS where PSS
    is unavailable.
    """
    try:
        root = psutil.Process(root_pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for process in processes:
        try:
            info = process.memory_full_info()
            total += getattr(info, "pss", info.rss)
        except psutil.AccessDenied:
            try:
                total += process.memory_info().rss
            except psutil.Error:
                continue
        except psutil.Error:
            continue
    return total


class TreeMemorySampler:
    """Samples :func:`tree_memory_bytes` in a thread; keeps the peak; can enforce a budget."""

    def __init__(
        self,
        root_pid: int,
        interval_s: float = 0.05,
        budget_bytes: int | None = None,
        on_over_budget: Callable[[int], None] | None = None,
        extra_sample: Callable[[], None] | None = None,
    ) -> None:
        self.root_pid = root_pid
        self.interval_s = interval_s
        self.budget_bytes = budget_bytes
        self.on_over_budget = on_over_budget
        self.extra_sample = extra_sample
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-memory", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            used = tree_memory_bytes(self.root_pid)
            self.peak_bytes = max(self.peak_bytes, used)
            if self.extra_sample is not None:
                self.extra_sample()
            if self.budget_bytes is not None and used > self.budget_bytes \
                    and self.on_over_budget is not None:
                self.on_over_budget(used)
                return
            self._stop.wait(self.interval_s)

    def __enter__(self) -> TreeMemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
