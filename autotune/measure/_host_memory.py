"""Host memory of a whole process tree, sampled from outside while a trial runs."""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import time
from collections.abc import Callable

import psutil

#: The sampler may spend at most this share of one core reading memory.
MAX_SAMPLING_SHARE = 0.02
MIN_INTERVAL_S = 0.25
#: PSS is read again only once the tree's resident memory has grown by this share since the
#: last reading (or passed the budget). Reading PSS walks every page table of every process
#: under the process's memory-map lock (tens of ms for a torch process), and a trial that maps
#: and unmaps large tensors each step waits for it, whereas RSS is a kernel counter that costs
#: nothing to read. Reading RSS first keeps a steady tree's samples cheap, so the sampler
#: checks the budget every :data:`MIN_INTERVAL_S` instead of slowing to its PSS reads' pace
#: (evidence: benchmarks/RESULTS.md).
PSS_REREAD_GROWTH = 0.02
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
#: How often the list of the tree's processes is walked again (listing /proc costs more than
#: reading a few processes' memory); DataLoader workers appear at epoch starts.
PROCESS_LIST_TTL_S = 2.0


def _rollup_kib(pid: int | str, names: tuple[str, ...]) -> dict[str, int]:
    values: dict[str, int] = {}
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open(f"/proc/{pid}/smaps_rollup") as rollup,
    ):
        for line in rollup:
            name, _, rest = line.partition(":")
            if name in names:
                values[name] = int(rest.split()[0]) * 1024
    return values


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


def process_rss_bytes(pid: int) -> int:
    """Resident set size of one process from ``/proc/PID/statm``: the kernel's counters, read
    without walking page tables (shared pages count in full, so it bounds PSS from above)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return 0


def process_shared_pss_bytes(pid: int) -> int:
    """The part of a process's PSS that is shared pages (its PSS less its private pages).

    For a fork server, that is the share of the imported pages it holds for the trial it
    forked: added to the trial's own PSS, those pages count in full, as in a trial that
    imported everything itself. 0 where ``smaps_rollup`` cannot be read.
    """
    values = _rollup_kib(pid, ("Pss", "Private_Clean", "Private_Dirty"))
    if "Pss" not in values:
        return 0
    return max(0, values["Pss"] - values.get("Private_Clean", 0) - values.get("Private_Dirty", 0))


def reset_peak_rss() -> None:
    """Restart the process's high-water resident memory from now (Linux 4.0+), so that what
    runs next has a peak of its own."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def peak_rss_bytes() -> int:
    """The process's high-water resident memory (since the last :func:`reset_peak_rss`).

    The kernel keeps it, so it holds spikes that fall between a sampler's readings. Its shared
    pages count in full (see :func:`peak_proportional_bytes` to compare it with PSS).
    """
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def peak_proportional_bytes() -> int:
    """The process's high-water mark counted as PSS counts memory, to compare with the
    sampler's PSS readings.

    The kernel's high-water mark (:func:`peak_rss_bytes`) counts every shared page in full:
    the torch libraries mapped by the tuner too, the pages a fork server shares. Less what
    shared pages over-count now (RSS less PSS: imports and libraries, which do not change
    during a trial), it keeps a spike of the process's own memory that fell between two
    samples without reading a trial started one way higher than one started another.
    """
    peak = peak_rss_bytes()
    now = _rollup_kib("self", ("Rss", "Pss"))
    if "Rss" not in now or "Pss" not in now:
        return peak
    return max(0, peak - max(0, now["Rss"] - now["Pss"]))


def tree_pids(root_pid: int) -> list[int]:
    """The process and its descendants (empty when it is gone)."""
    try:
        root = psutil.Process(root_pid)
        return [root_pid, *(child.pid for child in root.children(recursive=True))]
    except psutil.Error:
        return []


def tree_memory_bytes(root_pid: int, pids: list[int] | None = None) -> int:
    """PSS summed over a process and its descendants (or the given ``pids`` of that tree).

    PSS splits each shared page between the processes mapping it, so DataLoader workers that
    share the parent's pages after ``fork`` are not counted twice.
    """
    return sum(
        process_pss_bytes(pid) for pid in (pids if pids is not None else tree_pids(root_pid))
    )


class TreeMemorySampler:
    """Samples :func:`tree_memory_bytes` in a thread; keeps the peak; can enforce a budget.

    Each sample reads the tree's resident memory (RSS, cheap); PSS, which splits the pages
    DataLoader workers share with their parent, is read only when RSS has grown by
    :data:`PSS_REREAD_GROWTH` since the last PSS reading or passed the budget. RSS bounds PSS
    from above, so a tree whose RSS is within the budget is within it; the peak is the PSS read
    at the highest RSS seen. The thread runs at the lowest priority, waits between samples
    fifty times as long as a sample takes (at least :data:`MIN_INTERVAL_S`), and lists the
    tree's processes again only every :data:`PROCESS_LIST_TTL_S`.
    """

    def __init__(
        self,
        root_pid: int,
        budget_bytes: int | None = None,
        on_over_budget: Callable[[int], None] | None = None,
        extra_sample: Callable[[], None] | None = None,
        sharing_pids: tuple[int, ...] = (),
    ) -> None:
        self.root_pid = root_pid
        #: Processes whose shared pages count with the tree (:func:`process_shared_pss_bytes`):
        #: a forked trial's server.
        self.sharing_pids = sharing_pids
        self.budget_bytes = budget_bytes
        self.on_over_budget = on_over_budget
        self.extra_sample = extra_sample
        self.peak_bytes = 0
        self.samples = 0
        #: Samples that read PSS (walked the tree's page tables).
        self.pss_reads = 0
        self._rss_at_last_pss = 0
        #: Seconds the thread spent sampling, to check what it costs.
        self.busy_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-memory", daemon=True)

    def _run(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        pids: list[int] = []
        listed_at = float("-inf")
        while not self._stop.is_set():
            started = time.perf_counter()
            if started - listed_at >= PROCESS_LIST_TTL_S:
                pids, listed_at = tree_pids(self.root_pid), started
            self.samples += 1
            used = self._read_pss(pids)
            if self.extra_sample is not None:
                self.extra_sample()
            if (
                used is not None
                and self.budget_bytes is not None
                and used > self.budget_bytes
                and self.on_over_budget is not None
            ):
                self.on_over_budget(used)
                return
            cost = time.perf_counter() - started
            self.busy_s += cost
            self._stop.wait(max(MIN_INTERVAL_S, cost / MAX_SAMPLING_SHARE))

    def _read_pss(self, pids: list[int]) -> int | None:
        """The tree's PSS when its RSS calls for a reading (see the class), else None."""
        # The sharing processes' RSS holds every page their shared PSS counts a share of.
        rss = sum(process_rss_bytes(pid) for pid in (*pids, *(self.sharing_pids if pids else ())))
        over_budget = self.budget_bytes is not None and rss > self.budget_bytes
        if (
            self.pss_reads
            and not over_budget
            and rss <= self._rss_at_last_pss * (1 + PSS_REREAD_GROWTH)
        ):
            return None
        used = tree_memory_bytes(self.root_pid, pids)
        if pids:
            used += sum(process_shared_pss_bytes(pid) for pid in self.sharing_pids)
        self.pss_reads += 1
        self._rss_at_last_pss = max(self._rss_at_last_pss, rss)
        self.peak_bytes = max(self.peak_bytes, used)
        return used

    def __enter__(self) -> TreeMemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
