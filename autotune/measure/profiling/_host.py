"""Host probes on a CPU: what glibc's heap and a fork's copy-on-write cost the step.

With glibc's default handling of freed memory a fresh trial's heap hands large blocks back and
faults them in again every step; :func:`profile_fresh_heap` times that against retaining freed
memory, and :func:`fault_seconds` what one page fault costs. Workers started anew each epoch fork
the trial process, after which its next step copies the pages it writes;
:func:`profile_fork_copy` times that step. The predictor's host model reads these points.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import resource
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from autotune.measure._host_allocator import release_freed_memory, retain_freed_memory
from autotune.measure.profiling._bench import (
    STEP_WINDOW_S,
    SampleBatches,
    StepBench,
    is_out_of_memory,
    timed_steps,
)
from autotune.measure.profiling._plan import ProfilePlan
from autotune.measure.profiling._step import STEP_PASSES
from autotune.predict import ForkCopyPoint, HeapPoint
from autotune.workload import Workload

#: Seconds of each of the two windows :func:`profile_fresh_heap` times per heap (the fastest
#: counts, as for the sweep's points): longer than a sweep's point, since one ratio scales
#: every prediction of glibc's default heap.
FRESH_HEAP_WINDOW_S = 0.3
#: Bytes of fresh anonymous memory :func:`fault_seconds` writes a byte of per page, and how
#: many times (the fastest counts, as for every window): enough pages for a per-fault cost
#: that the clock's resolution does not blur.
FAULT_PROBE_BYTES = 32 * 2**20
FAULT_PROBE_REPEATS = 5
#: Forks after which the step is timed by :func:`profile_fork_copy` (the smaller excess counts,
#: since interference only adds to it).
FORK_COPY_REPEATS = 2


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def fault_seconds() -> float | None:
    """Seconds one minor page fault costs this process: a fresh anonymous mapping of
    :data:`FAULT_PROBE_BYTES` written a byte per page (the kernel maps and zeroes each page as
    it is first written), the fastest of :data:`FAULT_PROBE_REPEATS` over the faults it took.
    Memory mapped as glibc maps a large block, so a fault is what the step's faults are: a huge
    page where the kernel backs such mappings with them. None where the writes took none."""
    fastest = math.inf
    for _ in range(FAULT_PROBE_REPEATS):
        mapping = mmap.mmap(-1, FAULT_PROBE_BYTES)
        pages = np.frombuffer(mapping, dtype=np.uint8)[:: mmap.PAGESIZE]
        faults = _minor_faults()
        started = time.perf_counter()
        pages[:] = 1
        elapsed = time.perf_counter() - started
        taken = _minor_faults() - faults
        del pages  # the mapping cannot close while a view holds it
        mapping.close()
        if taken > 0:
            fastest = min(fastest, elapsed / taken)
    return None if fastest == math.inf else fastest


def _heap_window(bench: StepBench, batch: Any, batch_size: int) -> tuple[float, float]:
    """Samples/s of the median step and minor page faults per step over one window of
    :data:`FRESH_HEAP_WINDOW_S` (three steps at least), after one untimed step."""
    bench.step(batch)
    faults = _minor_faults()
    times, _ = timed_steps(bench, [batch], FRESH_HEAP_WINDOW_S)
    return batch_size / statistics.median(times), (_minor_faults() - faults) / len(times)


def _fastest_window(bench: StepBench, batch: Any, batch_size: int) -> tuple[float, float]:
    """The faster of :data:`~autotune.measure.profiling._step.STEP_PASSES` windows (as for
    every point)."""
    return max(_heap_window(bench, batch, batch_size) for _ in range(STEP_PASSES))


def profile_fresh_heap(
    workload: Workload, device: torch.device, source: SampleBatches, plan: ProfilePlan
) -> list[HeapPoint]:
    """How fast the step runs with glibc's default handling of freed memory, as a share of its
    speed retaining it (see :class:`HeapPoint`), in the space's first precision and layout (its
    baseline's); this process retains freed memory from its second timing on (the caller sets
    that where an out-of-memory error came first and no ratio is returned).

    Timed first, at the workload's batch and in the heap a trial starts with, then retaining,
    so the sweep after it times what trials retaining freed memory see. Only the first
    precision meets a fresh heap: once one has stepped, glibc's thresholds have risen, and a
    precision timed after it faults in a few pages a step, not thousands. The faster of two
    windows counts on each side, as for every point.

    The ratio is the step's time retaining plus the pages glibc's defaults faulted in beyond
    it, each at the cost :func:`fault_seconds` times: the two windows' times alone, taken
    seconds apart on a machine whose speed moves, scatter the ratio far more than the count of
    pages does (evidence: benchmarks/log/).
    """
    batch_size = plan.loader_batch_size
    amp, channels_last = plan.amp_modes[0], plan.channels_last[0]
    try:
        bench = StepBench(workload, device, amp, channels_last)
        batch = bench.on_device(source.make(batch_size))
        release_freed_memory()
        fresh_rate, fresh_faults = _fastest_window(bench, batch, batch_size)
        retain_freed_memory()
        kept_rate, kept_faults = _fastest_window(bench, batch, batch_size)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        return []  # the sweep finds out what fits; the predictions go without the ratio
    timed = min(1.0, fresh_rate / kept_rate)
    ratio = timed
    fault_s = fault_seconds()
    if fault_s is not None:
        faulting_s = max(0.0, fresh_faults - kept_faults) * fault_s
        ratio = 1.0 / (1.0 + faulting_s * kept_rate / batch_size)
    return [
        HeapPoint(
            amp=amp,
            batch_size=batch_size,
            ratio=ratio,
            timed_ratio=timed,
            fault_s=fault_s,
            faults_per_step=fresh_faults,
            retained_faults_per_step=kept_faults,
        )
    ]


@contextlib.contextmanager
def _forked_child() -> Iterator[None]:
    """A process forked from this one that only waits until the block ends: meanwhile this
    process's pages are shared with it copy-on-write, as with a DataLoader worker."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: wait for the parent's word (end of file), then leave at once
        os.close(write_end)
        os.read(read_end, 1)
        os._exit(0)
    os.close(read_end)
    try:
        yield
    finally:
        os.close(write_end)
        os.waitpid(pid, 0)


def profile_fork_copy(
    workload: Workload, device: torch.device, source: SampleBatches, plan: ProfilePlan
) -> ForkCopyPoint | None:
    """What a fork costs the next step (see :class:`ForkCopyPoint`): at the plan's smallest
    batch in its first precision and layout, an ordinary step (the median of a window) against
    the step right after a fork, the smaller excess of :data:`FORK_COPY_REPEATS` forks (the
    step before each makes the pages its own again). None where the step ran out of memory."""
    batch_size = min(plan.batch_sizes)
    amp, channels_last = plan.amp_modes[0], plan.channels_last[0]
    try:
        bench = StepBench(workload, device, amp, channels_last)
        batch = bench.on_device(source.make(batch_size))
        bench.step(batch)
        times, _ = timed_steps(bench, [batch], STEP_WINDOW_S)
        ordinary = statistics.median(times)
        excess, faults = math.inf, 0
        for _ in range(FORK_COPY_REPEATS):
            with _forked_child():
                before = _minor_faults()
                started = time.perf_counter()
                bench.step(batch)
                elapsed = time.perf_counter() - started
                taken = _minor_faults() - before
            if elapsed - ordinary < excess:
                excess, faults = elapsed - ordinary, taken
            bench.step(batch)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        return None
    return ForkCopyPoint(
        amp=amp,
        channels_last=channels_last,
        batch_size=batch_size,
        faults=faults,
        seconds=max(0.0, excess),
    )
