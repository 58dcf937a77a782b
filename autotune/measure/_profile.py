"""The profile, measured inside one trial process: the step alone, then the loader alone.

**Step alone**: a few real batches are read from the dataset once (collated as the loader
would), put on the device and cycled, so the step is timed without waiting for data. It runs
through :class:`TrainingStep` (autocast, backward, GradScaler, channels_last): the same code a
trial times. Batch sizes are tried in ascending order per precision and layout, stopping at the
first out-of-memory (on a CPU: the first batch whose predicted memory passes the budget). Each
precision and layout is swept twice, and each batch keeps the faster of its two windows: on a
shared machine a few seconds of interference only ever slow a step down, and the second sweep
meets a given batch seconds after the first did (see :data:`STEP_PASSES`). On a CPU the second
sweep times only the batches whose first window kept fewer cores busy than the others, dipped
under each neighbouring batch, or took longer a step than a larger batch (:func:`doubtful`).
Interference that outlasts both sweeps of a precision and layout shows as fewer cores kept
busy than another kept: that one is timed once more after the others (:func:`short_of_cores`).
Where the space searches the step's intra-op threads (a CPU), the step is then timed on the
other thread counts too, at its smaller batches, within a share of the step budget. Where the
space holds configurations that accumulate gradients, the optimizer step and a backward adding
into kept gradients are timed alone as well: what accumulating saves and costs.

**Fresh heap** (a CPU with glibc, where the space holds glibc's default handling of freed
memory): before the sweep, the step is timed at the workload's batch in the space's first
precision in the heap a fresh trial starts with, then retaining freed memory, which the rest of
the profile keeps (see :func:`profile_fresh_heap`).

**Loader alone**: the DataLoader is built as a trial builds it and its batches are only pulled,
never copied or used, for a rising number of workers. The sweep goes beyond the searched grid
while the loader keeps scaling and the CPU and memory allow. Its fastest worker count and its
fewest workers are then timed again at a larger batch, which tells the cost of a batch apart
from that of its samples: in the main process (the loader's ceiling) and in a worker. The
sweep holds one batch ahead per worker; its fastest count that fits the epoch is timed again
with one and right after with PyTorch's default of two, whose gain tells how long a worker
waits for its batch to be taken.

Each part has its own time budget (see :data:`STEP_BUDGET_S`, :data:`LOADER_BUDGET_S`); a point
the budget leaves out is predicted from its neighbours, with more uncertainty.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import mmap
import os
import resource
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np
import psutil
import torch
from torch.utils.data import DataLoader, IterableDataset, default_collate

from autotune.measure._batches import map_tensors, to_device
from autotune.measure._host_allocator import (
    glibc_malloc,
    release_freed_memory,
    retain_freed_memory,
)
from autotune.measure._host_memory import peak_rss_bytes, reset_peak_rss, tree_memory_bytes
from autotune.measure._loop import _loader_length, build_loader, collect_setup_garbage
from autotune.measure._step import TrainingStep, forward_loss
from autotune.predict import (
    AccumulationPoint,
    ForkCopyPoint,
    HeapPoint,
    LoaderPoint,
    MemoryModel,
    Profile,
    StepPoint,
)
from autotune.space import TORCH_DEFAULT_PREFETCH_FACTOR, AmpMode, Config
from autotune.workload import Workload

#: Seconds for the whole step sweep. Each point needs a warm-up step and a short timing; on a
#: 2-core CPU 20 s covers the grid's batches for one or two precisions, and a point left out is
#: extrapolated (and its predictions flagged as uncertain) rather than making every job wait.
STEP_BUDGET_S = 20.0
#: Seconds for the whole loader sweep: each worker count pays its workers' start-up (about
#: 0.05 s per worker here), a warm-up and a timed window.
LOADER_BUDGET_S = 20.0
#: Sweeps over the batch sizes of each precision and layout; a point keeps its fastest window.
#: Measured on a 2-core VM whose speed moves by up to 2x for seconds at a time, one sweep's
#: curve dipped by half at one batch size and recovered at the next. On a CPU the later sweeps
#: time only the points the first one casts doubt on (see :func:`doubtful`).
STEP_PASSES = 2
#: On a CPU, a point whose step kept fewer than this share of the cores the sweep's busiest
#: point kept busy was held back (another process or the hypervisor took a core); one that
#: ran this much slower than each of its neighbouring batches dipped; one whose step took this
#: much longer than a larger batch's step was slowed (a larger batch does more work): each is
#: timed again.
DOUBT_CORES_SHARE = 0.9
DOUBT_DIP = 0.10
#: Timed window of one step point in one sweep, and of one worker count.
STEP_WINDOW_S = 0.15
LOADER_WINDOW_S = 0.5
#: Step points measured per precision/layout even past its share of the budget: the smallest
#: batches are quick, and two points are what a memory model needs.
MIN_STEP_POINTS = 2
#: A precision/layout whose step at the smallest batch ran under this share of what a
#: combination timed before it ran there is timed at that batch only: no configuration of it can
#: come near the best (the search skips proposals predicted under a third of the best measured;
#: the same share). On a 2-core EPYC without AVX-512, where bf16 is emulated, text-transformer's
#: bf16 step ran 17-18 samples/s at batches 8-24 against fp32's 233-406, and its two sweeps and
#: a third for its idle core took 22.6 s of a 30 s step profile.
OUTPACED_SHARE = 1 / 3
#: Samples read once to build the step's batches (at most, and at most this many bytes of
#: them); larger batches repeat them.
SAMPLE_POOL = 256
SAMPLE_POOL_BYTES = 64 * 2**20
#: A worker count must deliver this much more than the best fewer workers did to count as
#: scaling; the sweep beyond the grid stops after two counts that do not.
SCALING_GAIN = 1.10
#: The extended sweep stops once the loader keeps this share of the cores busy.
CPU_SATURATION = 0.9
#: Share of the proportional gain (the worker ratio) a count must reach for the loader to count
#: as still scaling whatever the CPU reads: the CPU-busy stop is then not trusted.
PROPORTIONAL_SHARE = 0.5
#: The loader's second batch size is at most this multiple of the sweep's. Seen on an NVIDIA
#: H200 (text-transformer, 2026-11-26): 4 workers delivered 18,580 samples/s at batch 32 and
#: 16 no more, yet a trial at batch 512 with 4 workers trained at 39,322: handing a batch from
#: a worker to the main process costs per batch, not per sample.
LARGE_BATCH_FACTOR = 8
#: Seconds the timing at the larger batch may be expected to take (at the sweep's rate): the
#: split needs two batch sizes, not the largest. One slow-storage worker (231 samples/s on a
#: 2-core Xeon) took 5.5 s at batch 256 of a 31 s profile; batch 64 takes 1.4 s.
LARGE_BATCH_S = 2.0
#: Host bytes the larger batches in flight may hold (two per worker and the main process's),
#: with or without a memory budget: 224x224 float images with 16 workers stop at batch 96.
LARGE_BATCH_BYTES = 2 * 2**30
#: Batches each worker holds ahead in the loader sweep: one, so the start-up backlog to skip is
#: one round of workers.
SWEEP_PREFETCH = 1
#: Batches ahead per worker of the loader's second timing at the sweep's batch: PyTorch's
#: default. Seen on a 2-core CPU (slow-storage, batch 48, 48 workers): trials with two ahead
#: trained at 7,468-7,827 samples/s, with one at 6,744-6,888; the sweep's one ahead alone
#: cannot tell them apart.
AHEAD_PREFETCH = TORCH_DEFAULT_PREFETCH_FACTOR
#: Worker counts tried beyond the searched grid (the grid's own values above its cap first).
EXTENDED_WORKERS = (24, 32, 48, 64, 96, 128, 192, 256)
#: Share of the step budget spent timing the step on fewer intra-op threads, where the space
#: searches them: a few batches per precision and layout, smallest first, one window each.
THREADS_SHARE = 0.2
#: Seconds of each of the two windows :func:`profile_fresh_heap` times per heap (the fastest
#: counts, as for the sweep's points): longer than a sweep's point, since one ratio scales
#: every prediction of glibc's default heap.
FRESH_HEAP_WINDOW_S = 0.3
#: Bytes of fresh anonymous memory :func:`fault_seconds` writes a byte of per page, and how
#: many times (the fastest counts, as for every window).
FAULT_PROBE_BYTES = 32 * 2**20
FAULT_PROBE_REPEATS = 5
#: Forks after which the step is timed by :func:`profile_fork_copy` (the smaller excess counts).
FORK_COPY_REPEATS = 2
#: Rounds :func:`profile_accumulation` times (the medians count: each part a few
#: milliseconds, timed alone).
ACCUMULATION_REPEATS = 9
#: Share of the memory budget a step point may be predicted to need before the sweep stops.
MEMORY_MARGIN = 0.9
#: A precision/layout whose step kept fewer than this share of the cores another kept busy is
#: timed again (see :func:`short_of_cores`); only where that other kept more than
#: ``MULTI_CORE`` cores busy.
SHORT_OF_CORES = 0.75
MULTI_CORE = 1.5


@dataclass(frozen=True)
class ProfilePlan:
    """What to profile: the space's values and the budgets, as the parent sends them."""

    batch_sizes: Sequence[int]
    amp_modes: Sequence[AmpMode]
    channels_last: Sequence[bool]
    worker_counts: Sequence[int]
    loader_batch_size: int
    memory_budget_bytes: int | None = None
    #: Try worker counts beyond the grid (off when the user fixed or narrowed num_workers).
    extend_workers: bool = True
    step_budget_s: float = STEP_BUDGET_S
    loader_budget_s: float = LOADER_BUDGET_S
    #: Run with glibc keeping freed host memory (when the space holds that setting): the step
    #: sweep's one long-lived process then sees the heap a trial with it sees.
    retain_freed_memory: bool = False
    #: The space holds glibc's default handling of freed memory: on a CPU with glibc, time the
    #: step once in a fresh heap with it, then once retaining freed memory, and keep retaining
    #: (see :func:`profile_fresh_heap`).
    fresh_heap: bool = False
    #: Intra-op thread counts the space searches besides PyTorch's default (CPU only).
    intra_op_threads: Sequence[int] = ()
    #: The space holds workers started anew each epoch (``persistent_workers`` off) and
    #: retained freed memory: on a CPU, time what a fork costs the next step (see
    #: :func:`profile_fork_copy`).
    fork_copy: bool = False
    #: The space holds configurations that accumulate gradients over micro-batches (a batch
    #: under the baseline's effective batch that divides it): time what that saves and costs
    #: a step (see :func:`profile_accumulation`).
    accumulation: bool = False


#: Where each thread's time on a CPU is counted in nanoseconds (Linux).
_SCHEDSTAT = os.path.exists("/proc/self/schedstat")


def _cpu_seconds(process: psutil.Process, children: bool = False) -> float:
    """CPU seconds, user and system, of this process's threads (``process`` is this process)
    and, with ``children``, of its live children's threads.

    Read in nanoseconds: the kernel's user and system times per process (``psutil``'s
    ``cpu_times``) count in ticks of 10 ms, and each loader worker and the main process lose
    up to a tick in a window of half a second. On a 2-core Xeon five windows each of
    image-cnn's loader read, in ticks and then in nanoseconds: one worker at batch 32
    0.102-0.118 and 0.102-0.110 ms a sample, at batch 256 0.075-0.084 and 0.071-0.077; two at
    batch 128 0.075-0.089 and 0.077-0.085.
    """
    total = time.process_time()
    if children:
        for child in process.children(recursive=True):
            total += _child_cpu_seconds(child)
    return total


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


def _tensor_bytes(data: Any) -> int:
    total = 0

    def add(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    map_tensors(data, add)
    return total


def _sample_pool(dataset: Any, size: int) -> list[Any]:
    """Up to ``size`` samples, stopping once they hold :data:`SAMPLE_POOL_BYTES`."""
    source = (
        iter(dataset)
        if isinstance(dataset, IterableDataset)
        else (dataset[i] for i in range(min(size, len(dataset))))
    )
    pool: list[Any] = []
    held = 0
    for sample in islice(source, size):
        pool.append(sample)
        held += _tensor_bytes(sample)
        if held >= SAMPLE_POOL_BYTES:
            break
    return pool


class _Batches:
    """Batches of any size built from a pool of samples read once, collated like the loader."""

    def __init__(self, workload: Workload, dataset: Any, largest: int) -> None:
        self.collate: Callable[[list[Any]], Any] = workload.collate_fn or default_collate
        self.pool = _sample_pool(dataset, min(largest, SAMPLE_POOL))
        if not self.pool:
            raise RuntimeError("the dataset yields no sample; give it at least one")

    def make(self, batch_size: int, offset: int = 0) -> Any:
        size = len(self.pool)
        return self.collate([self.pool[(offset + i) % size] for i in range(batch_size)])

    def collate_seconds(self, batch_size: int) -> float:
        started = time.perf_counter()
        self.make(batch_size)
        return time.perf_counter() - started

    def sample_bytes(self) -> int:
        return _tensor_bytes(self.make(1))


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


class _StepBench:
    """One precision and layout: the model, its optimizer and the step, built once."""

    def __init__(
        self, workload: Workload, device: torch.device, amp: AmpMode, channels_last: bool
    ) -> None:
        self.workload = workload
        self.device = device
        self.training = TrainingStep(Config(amp=amp, channels_last=channels_last), device)
        self.model = self.training.prepare_model(workload.model())
        self.model.train()
        self.optimizer = workload.optimizer(self.model.parameters())
        self.channels_last = channels_last

    def on_device(self, batch: Any) -> Any:
        return to_device(batch, self.device, self.channels_last, non_blocking=False)

    def step(self, batch: Any) -> None:
        with self.training.autocast():
            loss = forward_loss(self.workload, self.model, batch)
        self.training.backward(loss, self.optimizer)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


#: Copies of a batch timed for its copy cost; the fastest counts (as for the step's windows).
COPY_REPEATS = 3


def _copied(bench: _StepBench, host_batch: Any) -> tuple[Any, float]:
    """``host_batch`` on the device, and the seconds putting it there takes as a trial without
    pinned memory does (a synchronous copy, then channels_last): the fastest of
    :data:`COPY_REPEATS` copies. Raises on OOM."""
    fastest = float("inf")
    for _ in range(COPY_REPEATS):
        bench.synchronize()
        started = time.perf_counter()
        on_device = bench.on_device(host_batch)
        bench.synchronize()
        fastest = min(fastest, time.perf_counter() - started)
    return on_device, fastest


def _timed_steps(
    bench: _StepBench, batches: list[Any], window_s: float
) -> tuple[list[float], float]:
    """Steps over ``batches`` in turn, each timed (on CUDA synchronised: the step alone, with
    no overlap to hide it), until at least three have run and ``window_s`` seconds have
    passed; their times and the window's seconds."""
    cuda = bench.device.type == "cuda"
    started = time.perf_counter()
    times: list[float] = []
    while True:
        step_started = time.perf_counter()
        bench.step(batches[len(times) % len(batches)])
        if cuda:
            bench.synchronize()
        now = time.perf_counter()
        times.append(now - step_started)
        if len(times) >= 3 and now - started >= window_s:
            return times, now - started


def _time_step(
    bench: _StepBench, batches: list[Any], batch_size: int, deadline: float
) -> StepPoint:
    """One warm-up step, then steps for :data:`STEP_WINDOW_S` (at least three), each timed
    (on CUDA synchronised: the step alone, with no overlap to hide it). Raises on OOM."""
    cuda = bench.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(bench.device)
    else:
        release_freed_memory()
        reset_peak_rss()
    bench.step(batches[0])
    bench.synchronize()
    process = psutil.Process()
    cpu_before = _cpu_seconds(process)
    window_s = min(STEP_WINDOW_S, max(0.0, deadline - time.perf_counter()))
    times, wall = _timed_steps(bench, batches, window_s)
    cpu = _cpu_seconds(process) - cpu_before
    memory = int(torch.cuda.max_memory_allocated(bench.device)) if cuda else peak_rss_bytes()
    return StepPoint(
        batch_size=batch_size,
        amp=bench.training.config.amp,
        # The median step: a step the machine's other work preempted says nothing of this one.
        channels_last=bench.channels_last,
        samples_per_s=batch_size / statistics.median(times),
        cpu_cores=None if cuda else cpu / wall,
        peak_memory_bytes=memory,
    )


def _over_budget(points: list[StepPoint], batch_size: int, budget: int | None) -> bool:
    """Whether the memory model of the points so far puts ``batch_size`` over the budget."""
    if budget is None or not points:
        return False
    if (points[-1].peak_memory_bytes or 0) > budget:
        return True
    first = points[0]
    model = MemoryModel.fit(
        first.amp, first.channels_last, [(p.batch_size, p.peak_memory_bytes or 0) for p in points]
    )
    return model is not None and model.predict(batch_size) > MEMORY_MARGIN * budget


def outpaced(points: Sequence[StepPoint]) -> set[tuple[AmpMode, bool]]:
    """The precision/layout combinations whose only timed point ran under
    :data:`OUTPACED_SHARE` of another combination's at its batch."""
    by_combo: dict[tuple[AmpMode, bool], list[StepPoint]] = {}
    for point in points:
        if point.samples_per_s:
            by_combo.setdefault((point.amp, point.channels_last), []).append(point)
    return {
        combo for combo, ran in by_combo.items() if len(ran) == 1 and _outpaced_by(ran[0], points)
    }


def _outpaced_by(point: StepPoint, others: Sequence[StepPoint]) -> bool:
    rates = [
        p.samples_per_s
        for p in others
        if p.batch_size == point.batch_size
        and p.samples_per_s
        and (p.amp, p.channels_last) != (point.amp, point.channels_last)
    ]
    return bool(point.samples_per_s and rates and point.samples_per_s < OUTPACED_SHARE * max(rates))


def _sweep(
    bench: _StepBench,
    source: _Batches,
    batch_sizes: Sequence[int],
    deadline: float,
    memory_budget: int | None,
    earlier: Sequence[StepPoint] = (),
) -> list[StepPoint]:
    """One pass over ``batch_sizes`` in ascending order; ends with an out-of-memory point where
    a batch did not fit, early when the deadline passes (after :data:`MIN_STEP_POINTS`), and
    after the first point where that ran under :data:`OUTPACED_SHARE` of a combination timed
    ``earlier`` at its batch."""
    amp, channels_last = bench.training.config.amp, bench.channels_last
    ran: list[StepPoint] = []
    for batch_size in batch_sizes:
        if time.perf_counter() >= deadline and len(ran) >= MIN_STEP_POINTS:
            break
        if bench.device.type != "cuda" and _over_budget(ran, batch_size, memory_budget):
            return [
                *ran,
                StepPoint(
                    batch_size=batch_size, amp=amp, channels_last=channels_last, out_of_memory=True
                ),
            ]
        try:
            on_device, copy_s = _copied(bench, source.make(batch_size))
            batches = [on_device]
            del on_device  # held by ``batches`` alone, which ``finally`` lets go
            point = _time_step(bench, batches, batch_size, deadline)
            point = point.model_copy(update={"copy_s": copy_s})
        except Exception as exc:
            if not _is_oom(exc):
                raise
            return [
                *ran,
                StepPoint(
                    batch_size=batch_size, amp=amp, channels_last=channels_last, out_of_memory=True
                ),
            ]
        finally:
            batches = []
            if bench.device.type == "cuda":
                torch.cuda.empty_cache()
        ran.append(point)
        if len(ran) == 1 and _outpaced_by(point, earlier):
            break
    return ran


def _faster(first: StepPoint, again: StepPoint | None) -> StepPoint:
    """The point's faster window of two sweeps, with the larger peak memory of the two."""
    if again is None or again.samples_per_s is None:
        return first
    faster = again if (again.samples_per_s or 0.0) > (first.samples_per_s or 0.0) else first
    memory = max(first.peak_memory_bytes or 0, again.peak_memory_bytes or 0)
    return faster.model_copy(update={"peak_memory_bytes": memory or None})


def _started_bench(
    workload: Workload,
    device: torch.device,
    source: _Batches,
    batch_size: int,
    combo: tuple[AmpMode, bool],
) -> _StepBench | None:
    """On CUDA, the first precision's bench after one untimed step of the smallest batch,
    before the sweep's clock starts: the context, cuBLAS's and cuDNN's handles and the
    allocator start here, not in the first precision's share of the budget (on an H200 that
    share reached only batch 16 while the others reached 192). None on other devices."""
    if device.type != "cuda":
        return None
    bench = _StepBench(workload, device, *combo)
    # A step that fails here (out of memory, say) fails again in the sweep, which reports it.
    with contextlib.suppress(Exception):
        bench.step(bench.on_device(source.make(batch_size)))
        bench.synchronize()
    torch.cuda.empty_cache()
    return bench


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


def _heap_window(bench: _StepBench, batch: Any, batch_size: int) -> tuple[float, float]:
    """Samples/s of the median step and minor page faults per step over one window of
    :data:`FRESH_HEAP_WINDOW_S` (three steps at least), after one untimed step."""
    bench.step(batch)
    faults = _minor_faults()
    times, _ = _timed_steps(bench, [batch], FRESH_HEAP_WINDOW_S)
    return batch_size / statistics.median(times), (_minor_faults() - faults) / len(times)


def _fastest_window(bench: _StepBench, batch: Any, batch_size: int) -> tuple[float, float]:
    """The faster of :data:`STEP_PASSES` windows (as for every point)."""
    return max(_heap_window(bench, batch, batch_size) for _ in range(STEP_PASSES))


def profile_fresh_heap(
    workload: Workload, device: torch.device, source: _Batches, plan: ProfilePlan
) -> list[HeapPoint]:
    """How fast the step runs with glibc's default handling of freed memory, as a share of its
    speed retaining it (see :class:`HeapPoint`), in the space's first precision and layout (its
    baseline's); this process retains freed memory from its second timing on (the caller sets
    that where an out-of-memory error came first and no ratio is returned).

    Timed first, at the workload's batch and in the heap a trial starts with, then retaining,
    so the sweep after it times what trials retaining freed memory see. On a 2-core EPYC
    (image-cnn, batch 32, fp32) glibc's defaults faulted in 1,100-3,500 pages a step and
    retained memory none, and trials with glibc's defaults ran at 0.73-0.81 of the sweep's
    points (benchmarks/RESULTS.md 1b). Only the first precision meets a fresh heap: once one
    has stepped, glibc's thresholds have risen, and image-cnn's bf16 timed after its fp32
    faulted 91 pages a step, not thousands. The faster of two windows counts on each side, as
    for every point.

    The ratio is the step's time retaining plus the pages glibc's defaults faulted in beyond
    it, each at the cost :func:`fault_seconds` times: the two windows' times alone, seconds
    apart on a machine whose speed moves, read image-cnn's ratio at 0.70, 0.75, 0.83 and 1.00
    in four profiles on one 2-core EPYC, where each page cost 2.1-2.4 us by the first three
    and 2.2 us by the probe (benchmarks/RESULTS.md 1b).
    """
    batch_size = plan.loader_batch_size
    amp, channels_last = plan.amp_modes[0], plan.channels_last[0]
    try:
        bench = _StepBench(workload, device, amp, channels_last)
        batch = bench.on_device(source.make(batch_size))
        release_freed_memory()
        fresh_rate, fresh_faults = _fastest_window(bench, batch, batch_size)
        retain_freed_memory()
        kept_rate, kept_faults = _fastest_window(bench, batch, batch_size)
    except Exception as exc:
        if not _is_oom(exc):
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
    workload: Workload, device: torch.device, source: _Batches, plan: ProfilePlan
) -> ForkCopyPoint | None:
    """What a fork costs the next step (see :class:`ForkCopyPoint`): at the plan's smallest
    batch in its first precision and layout, an ordinary step (the median of a window) against
    the step right after a fork, the smaller excess of :data:`FORK_COPY_REPEATS` forks (the
    step before each makes the pages its own again). None where the step ran out of memory."""
    batch_size = min(plan.batch_sizes)
    amp, channels_last = plan.amp_modes[0], plan.channels_last[0]
    try:
        bench = _StepBench(workload, device, amp, channels_last)
        batch = bench.on_device(source.make(batch_size))
        bench.step(batch)
        times, _ = _timed_steps(bench, [batch], STEP_WINDOW_S)
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
        if not _is_oom(exc):
            raise
        return None
    return ForkCopyPoint(
        amp=amp,
        channels_last=channels_last,
        batch_size=batch_size,
        faults=faults,
        seconds=max(0.0, excess),
    )


def profile_accumulation(
    workload: Workload, device: torch.device, source: _Batches, plan: ProfilePlan
) -> AccumulationPoint | None:
    """What accumulating gradients saves and costs a step (see :class:`AccumulationPoint`),
    at the plan's smallest batch in its first precision and layout (the optimizer's work and
    the gradients' size depend on the parameters, not the batch). Each of
    :data:`ACCUMULATION_REPEATS` rounds times a backward writing the gradients afresh, one
    adding into them, then the optimizer step with zeroing them, on CUDA synchronised; the
    medians of the step and of each round's difference between the two backwards count.
    Without a GradScaler's unscaling, which fp16 adds. None where the step ran out of
    memory."""
    batch_size = min(plan.batch_sizes)
    amp, channels_last = plan.amp_modes[0], plan.channels_last[0]

    def timed(work: Callable[[], object]) -> float:
        bench.synchronize()
        started = time.perf_counter()
        work()
        bench.synchronize()
        return time.perf_counter() - started

    def backward() -> float:
        with bench.training.autocast():
            loss = forward_loss(workload, bench.model, batch)
        return timed(loss.backward)

    def optimizer_step() -> None:
        bench.optimizer.step()
        bench.optimizer.zero_grad(set_to_none=True)

    optimizer_s, accumulate_s = [], []
    try:
        bench = _StepBench(workload, device, amp, channels_last)
        batch = bench.on_device(source.make(batch_size))
        bench.step(batch)  # the optimizer's state exists from here on, as in a trial
        for _ in range(ACCUMULATION_REPEATS):
            fresh = backward()
            accumulate_s.append(backward() - fresh)
            optimizer_s.append(timed(optimizer_step))
    except Exception as exc:
        if not _is_oom(exc):
            raise
        return None
    return AccumulationPoint(
        amp=amp,
        batch_size=batch_size,
        optimizer_s=statistics.median(optimizer_s),
        accumulate_s=max(0.0, statistics.median(accumulate_s)),
    )


def step_batches(workload: Workload, dataset: Any, plan: ProfilePlan) -> _Batches:
    """The sample pool the step is timed on, for the plan's largest batch."""
    return _Batches(workload, dataset, max(plan.batch_sizes))


def profile_step(
    workload: Workload,
    dataset: Any,
    device: torch.device,
    plan: ProfilePlan,
    source: _Batches | None = None,
) -> tuple[list[StepPoint], _Batches]:
    """Step points per precision/layout by ascending batch, within the step budget.

    The first sweep finds the batches that fit; the later sweeps time those again (on a CPU,
    those the first casts doubt on: see :func:`doubtful`), and each point keeps its fastest
    window (a batch a later sweep did not reach in time keeps what it
    has). A combination outpaced at its smallest batch (see :data:`OUTPACED_SHARE`) keeps
    that one point: no later sweep, no thread counts, and where it kept fewer cores busy than
    another, no second timing if it would stay outpaced with their cores (see
    :func:`outpaced_on_every_core`); else that timing stops at that batch again unless it then
    keeps up.
    """
    batch_sizes = sorted(plan.batch_sizes)
    source = source or step_batches(workload, dataset, plan)
    combos = [(amp, cl) for amp in plan.amp_modes for cl in plan.channels_last]
    points: list[StepPoint] = []
    bench = _started_bench(workload, device, source, batch_sizes[0], combos[0])
    collect_setup_garbage()  # the sample pool's objects: a collection due, not a step's cost
    started = time.perf_counter()
    budget_s = plan.step_budget_s * (1 - THREADS_SHARE if _thread_counts(plan, device) else 1)
    for index, (amp, channels_last) in enumerate(combos):
        now = time.perf_counter()
        share = (budget_s - (now - started)) / (len(combos) - index)
        if bench is None:
            bench = _StepBench(workload, device, amp, channels_last)
        swept = _sweep(
            bench,
            source,
            batch_sizes,
            now + share / STEP_PASSES,
            plan.memory_budget_bytes,
            earlier=points,
        )
        passes = 1 if (amp, channels_last) in outpaced([*points, *swept]) else STEP_PASSES
        for sweep in range(1, passes):
            deadline = now + share * (sweep + 1) / STEP_PASSES
            retime = [p.batch_size for p in doubtful(swept)]
            again = {p.batch_size: p for p in _sweep(bench, source, retime, deadline, None)}
            swept = [_faster(p, again.get(p.batch_size)) for p in swept]
        points.extend(swept)
        bench = None
    hopeless = outpaced_on_every_core(points)
    for combo in (c for c in short_of_cores(points) if c not in hopeless):
        # Timed again once, over every batch size (its sweeps may have stopped early), in its
        # place among the combinations; one still outpaced at its first batch stops there.
        bench = _StepBench(workload, device, *combo)
        others = [p for p in points if (p.amp, p.channels_last) != combo]
        retimed = _sweep(
            bench,
            source,
            batch_sizes,
            time.perf_counter() + budget_s / len(combos),
            plan.memory_budget_bytes,
            earlier=others,
        )
        bench = None
        first = next(i for i, p in enumerate(points) if (p.amp, p.channels_last) == combo)
        points = [
            *others[:first],
            *_merged([p for p in points if (p.amp, p.channels_last) == combo], retimed),
            *others[first:],
        ]
    return points, source


def doubtful(sweep: Sequence[StepPoint]) -> list[StepPoint]:
    """The timed points of one sweep (one precision and layout, by ascending batch) that a
    later sweep times again: on CUDA every one; on a CPU those the step's cores or the curve
    cast doubt on (see :data:`DOUBT_CORES_SHARE`, :data:`DOUBT_DIP`).

    A slow spell that takes cores from the step shows in the cores it kept busy; one that
    does not (a neighbour's memory traffic) shows where the curve dips and recovers, or, where
    it covers the first few batches of the sweep, where a batch's step took longer than a
    larger batch's: the curve only rises, too steeply (a step slowed to a third for the first
    half second read batches 8, 16 and 24 at 30 ms a step each and batch 32 at 10 ms). A
    second sweep of every point cost text-transformer's profile on a 2-core EPYC 7.3 s of its
    17.4 s step sweep, where no point was held back and only the smallest batch of fp32 (342
    samples/s beside 404 at the next, as a rising curve's smallest batch often reads) ran more
    than 3% under its neighbours. What it costs: over six profiles of each kind, interleaved,
    text-transformer's points spread more (90th percentile 36.3% against 27.8%, on a day of
    large drift) and read 5% lower; image-cnn's spread less (benchmarks/RESULTS.md 1b).
    """
    timed = [p for p in sweep if p.samples_per_s and not p.out_of_memory]
    if any(p.cpu_cores is None for p in timed):
        return timed
    busiest = max((p.cpu_cores or 0.0 for p in timed), default=0.0)
    picked = []
    for index, point in enumerate(timed):
        neighbours = [
            p.samples_per_s or 0.0 for p in timed[max(0, index - 1) : index + 2] if p is not point
        ]
        held_back = (point.cpu_cores or 0.0) < DOUBT_CORES_SHARE * busiest
        dipped = bool(neighbours) and (point.samples_per_s or 0.0) < (1 - DOUBT_DIP) * min(
            neighbours
        )
        slowed = any(
            (1 - DOUBT_DIP) * _step_s(point) > _step_s(larger) for larger in timed[index + 1 :]
        )
        if held_back or dipped or slowed:
            picked.append(point)
    return picked


def _step_s(point: StepPoint) -> float:
    """Seconds one step of a timed point took."""
    return point.batch_size / (point.samples_per_s or math.inf)


def short_of_cores(points: Sequence[StepPoint]) -> list[tuple[AmpMode, bool]]:
    """The precision/layout combinations whose step kept well under the cores another kept busy
    (the median of their points' :attr:`StepPoint.cpu_cores`, below :data:`SHORT_OF_CORES` of
    the busiest combination's), on a CPU where a step keeps more than one core busy. On a
    2-core EPYC one profile's fp32 read 160-420 samples/s on 1.0 core at batches 8-24 where
    every other profile read 1,814-2,495 on 2.0 (something took a core for those seconds);
    the job then predicted its baseline at 194 samples/s and measured 1,391-1,784. A
    combination that keeps fewer cores busy by its nature is timed again for nothing: one more
    share of the step budget.
    """
    medians = _median_cores(points)
    most = max(medians.values(), default=0.0)
    if len(medians) < 2 or most < MULTI_CORE:
        return []
    return [combo for combo, median in medians.items() if median < SHORT_OF_CORES * most]


def outpaced_on_every_core(points: Sequence[StepPoint]) -> set[tuple[AmpMode, bool]]:
    """The outpaced combinations (see :func:`outpaced`) that stay outpaced when their point is
    credited with the cores the busiest combination kept busy: timing them again with the
    cores to the step could not bring them near the others, so :func:`short_of_cores` does
    not. On a 2-core EPYC without AVX-512 text-transformer's emulated bf16 step ran 18
    samples/s at batch 16 on 1.3 cores, fp32 304 on 2.1: 3.4 s of a 13 s step profile went
    to timing it again.
    """
    most = max(_median_cores(points).values(), default=0.0)
    hopeless = set()
    for combo in outpaced(points):
        point = next(p for p in points if (p.amp, p.channels_last) == combo and p.samples_per_s)
        if point.cpu_cores and most > point.cpu_cores:
            point = point.model_copy(
                update={"samples_per_s": (point.samples_per_s or 0.0) * most / point.cpu_cores}
            )
        if _outpaced_by(point, points):
            hopeless.add(combo)
    return hopeless


def _median_cores(points: Sequence[StepPoint]) -> dict[tuple[AmpMode, bool], float]:
    """Per precision/layout, the median of its timed points' :attr:`StepPoint.cpu_cores`."""
    cores: dict[tuple[AmpMode, bool], list[float]] = {}
    for point in points:
        if point.cpu_cores is not None and point.samples_per_s:
            cores.setdefault((point.amp, point.channels_last), []).append(point.cpu_cores)
    return {combo: statistics.median(values) for combo, values in cores.items()}


def _merged(first: Sequence[StepPoint], again: Sequence[StepPoint]) -> list[StepPoint]:
    """One combination's points from two sweeps, by batch size: the faster window where both
    timed a batch, else the one that did (a batch one sweep found out of memory stays so)."""
    by_batch = {p.batch_size: p for p in first}
    for point in again:
        known = by_batch.get(point.batch_size)
        if known is None:
            by_batch[point.batch_size] = point
        elif known.out_of_memory or point.out_of_memory:
            by_batch[point.batch_size] = known if known.out_of_memory else point
        else:
            by_batch[point.batch_size] = _faster(known, point)
    return [by_batch[b] for b in sorted(by_batch)]


def _thread_counts(plan: ProfilePlan, device: torch.device) -> list[int]:
    """The intra-op thread counts to time the step on: those the space searches, on a CPU,
    other than what PyTorch runs by default."""
    if device.type == "cuda":
        return []
    default = torch.get_num_threads()
    return sorted({t for t in plan.intra_op_threads if t != default})


def profile_step_threads(
    workload: Workload,
    device: torch.device,
    source: _Batches,
    points: Sequence[StepPoint],
    plan: ProfilePlan,
) -> list[StepPoint]:
    """The step on each of the space's other intra-op thread counts, per precision and layout
    the sweep ran, at its batches in ascending order until its share of
    :data:`THREADS_SHARE` of the step budget is spent (at least the smallest batch)."""
    counts = _thread_counts(plan, device)
    ruled_out = outpaced(points)
    combos = sorted({(p.amp, p.channels_last) for p in points if p.samples_per_s} - ruled_out)
    if not counts or not combos:
        return []
    default = torch.get_num_threads()
    measured: list[StepPoint] = []
    started = time.perf_counter()
    budget_s = plan.step_budget_s * THREADS_SHARE
    todo = [(threads, combo) for threads in counts for combo in combos]
    try:
        for index, (threads, (amp, channels_last)) in enumerate(todo):
            torch.set_num_threads(threads)
            deadline = started + budget_s * (index + 1) / len(todo)
            bench = _StepBench(workload, device, amp, channels_last)
            ran = sorted(
                p.batch_size
                for p in points
                if p.samples_per_s and p.amp == amp and p.channels_last == channels_last
            )
            for timed, batch_size in enumerate(ran):
                if timed and time.perf_counter() >= deadline:
                    break
                try:
                    on_device, copy_s = _copied(bench, source.make(batch_size))
                    point = _time_step(bench, [on_device], batch_size, deadline)
                except Exception as exc:
                    if not _is_oom(exc):
                        raise
                    break
                measured.append(point.model_copy(update={"copy_s": copy_s, "threads": threads}))
    finally:
        torch.set_num_threads(default)
    return measured


def memory_models(points: Sequence[StepPoint]) -> list[MemoryModel]:
    """One linear memory model per precision and layout, from the points that ran."""
    models = []
    for amp, channels_last in dict.fromkeys((p.amp, p.channels_last) for p in points):
        data = [
            (p.batch_size, p.peak_memory_bytes)
            for p in points
            if p.amp == amp
            and p.channels_last == channels_last
            and p.peak_memory_bytes is not None
            and not p.out_of_memory
        ]
        model = MemoryModel.fit(amp, channels_last, [(b, m) for b, m in data if m is not None])
        if model is not None:
            models.append(model)
    return models


_EPOCH_END = object()


def _measure_loader(
    workload: Workload,
    dataset: Any,
    batch_size: int,
    workers: int,
    prefetch_factor: int = SWEEP_PREFETCH,
) -> LoaderPoint:
    """Pull batches of a fresh loader with ``workers`` workers, each ``prefetch_factor``
    batches ahead; time the steady state."""
    config = Config(
        batch_size=batch_size,
        num_workers=workers,
        prefetch_factor=prefetch_factor if workers else None,
    )
    loader: DataLoader[Any] = build_loader(workload, config, dataset)
    process = psutil.Process()
    length = _loader_length(loader)
    # Starting the workers, as every epoch does again without persistent workers. (Their
    # shutdown here would wait for batches in flight, which an epoch's end does not have.)
    start = time.perf_counter()
    iterator: Iterator[Any] = iter(loader)
    restart = time.perf_counter() - start
    pulled = 0
    try:
        # The workers' start-up backlog (prefetch_factor batches each) is not steady state.
        warmup = workers * (config.prefetch_factor or 0) + 1
        for _ in range(warmup):
            if next(iterator, _EPOCH_END) is _EPOCH_END:
                break  # too short an epoch: reported below, as nothing was timed
        # The clock starts as the last warm-up batch arrives: the workers read on while the
        # CPU times below are taken, and reading 48 workers' took 81 ms on a 2-core EPYC, a
        # fifth of a window of one round that the clock missed (slow-storage, 48 workers at
        # batch 32: 4,770-8,495 samples/s in whole rounds timed from after the reading,
        # 5,149-5,398 from here; 24 at batch 64: 5,376-5,810, then 5,117-5,242).
        started = time.perf_counter()
        cpu_before = _cpu_seconds(process, children=True)
        # The main thread's own CPU clock: fine-grained, where the process's CPU times count
        # in ticks of 10 ms (a 0.5 s window of 70 batches read 0 ms, then 1.8 ms, a batch).
        main_before = time.thread_time()
        # The window ends before the epoch does: the last batch would shut the workers down
        # before their CPU time is read, and a new epoch would time their restart.
        left = None if length is None else _whole_rounds(length - warmup - 1, workers)
        while left is None or pulled < left:
            try:
                next(iterator)
            except StopIteration:
                break
            pulled += 1
            if (
                pulled >= max(2, workers)
                and pulled % max(1, workers) == 0
                and time.perf_counter() - started >= LOADER_WINDOW_S
            ):
                break
        wall = time.perf_counter() - started
        cpu = max(0.0, _cpu_seconds(process, children=True) - cpu_before)
        main_cpu = max(0.0, time.thread_time() - main_before)
        memory = tree_memory_bytes(os.getpid())
    finally:
        del iterator
    if not pulled:
        raise RuntimeError(
            f"an epoch holds too few batches of {batch_size} to time "
            f"{workers} workers; give the dataset more samples"
        )
    samples = pulled * batch_size
    return LoaderPoint(
        num_workers=workers,
        samples_per_s=samples / wall,
        prefetch_factor=prefetch_factor if workers else None,
        cpu_s_per_sample=cpu / samples,
        main_cpu_s_per_batch=main_cpu / pulled if workers else None,
        memory_bytes=memory,
        restart_s=restart if workers else None,
    )


def _whole_rounds(batches: int, workers: int) -> int:
    """The most of ``batches`` that make whole rounds of ``workers`` (all of them where they
    make less than one round, or without workers).

    Workers deliver in turn, and started together they finish their batches together, so
    batches arrive in bursts a round apart: a window of a round and a half reads the burst it
    ends on as if it had taken no time. Timed from one batch to the batch a whole number of
    rounds later, every worker delivered the same number of batches in it. On a 2-core EPYC
    (slow-storage, a 4 ms sleep per sample, 4.56 ms a sample with one worker) 24 workers at
    batch 64, whose epoch leaves 38 batches after the warm-up, read 5,908-6,982 samples/s,
    above the 6,000 that 24 sleeping workers can deliver at all.
    """
    if workers < 1 or batches < workers:
        return batches
    return batches - batches % workers


def _next_counts(grid: Sequence[int]) -> list[int]:
    top = max(grid)
    return [w for w in EXTENDED_WORKERS if w > top]


def profile_loader(
    workload: Workload, dataset: Any, plan: ProfilePlan, cpu_count: int
) -> list[LoaderPoint]:
    """Loader points for the grid's worker counts, then beyond while it keeps scaling.

    The sweep ends once two counts in a row brought no gain of :data:`SCALING_GAIN` (the rest
    of the grid is predicted as that plateau): one count alone can read low (in a profile on a
    2-core EPYC slow-storage's 24 workers read 3,547 samples/s, below 16's 3,640, and 4,735-
    4,787 timed alone right after; 32 and 48 workers read 6,248-7,381 and 7,722-10,285). Beyond
    the grid it also ends once the workers keep the CPU busy, the next count's memory would
    not fit the budget, or time is up.

    A count that leaves cores idle yet reads no gain is timed again right after the best count
    is (see :func:`_retimed`): the gain is judged on that back-to-back pair, and each keeps the
    faster of its windows. A slow spell of the machine can outlast two counts: on a 2-core Xeon
    a default slow-storage job's profile read 24 and 32 workers at 2,870 and 3,244 samples/s,
    below 16's 3,467, and ended there; its search could not go past 16 workers and recommended
    0.53x of what 48 reached in trials minutes later (6,706-6,745 against 3,580-3,660).
    """
    length = _length(dataset)
    started = time.perf_counter()
    points: list[LoaderPoint] = []
    flat = 0
    grid = sorted(set(plan.worker_counts))
    # A geometric subset of the grid (0, 1, 2, 4, 8, ... and its top): the counts between are
    # interpolated, which leaves time to look beyond the grid.
    measured = [w for w in grid if w <= 1 or w & (w - 1) == 0 or w == grid[-1]]
    beyond_grid = _next_counts(grid) if plan.extend_workers else []
    for workers in [*measured, *beyond_grid]:
        if time.perf_counter() - started >= plan.loader_budget_s or flat >= 2:
            break
        if length is not None and (2 * workers + 3) * plan.loader_batch_size > length:
            break  # an epoch holds too few batches to time that many workers
        if points and _loader_saturated(points, cpu_count, workers, plan):
            break
        point = _measure_loader(workload, dataset, plan.loader_batch_size, workers)
        best = max(points, key=lambda p: p.samples_per_s, default=None)
        gained = best is None or point.samples_per_s > SCALING_GAIN * best.samples_per_s
        if (
            not gained
            and workers >= 2
            and best is not None
            and best.num_workers
            and not _cores_busy(point, cpu_count)
        ):
            again, point, gained = _retimed(workload, dataset, plan.loader_batch_size, best, point)
            points[points.index(best)] = again
        flat = 0 if gained or workers < 2 else flat + 1
        points.append(point)
    return points


def _cores_busy(point: LoaderPoint, cpu_count: int) -> bool:
    """The loader kept :data:`CPU_SATURATION` of the cores busy: more workers could only
    share them, so a count without a gain is no slow spell."""
    return point.samples_per_s * point.cpu_s_per_sample >= CPU_SATURATION * cpu_count


def _retimed(
    workload: Workload, dataset: Any, batch_size: int, best: LoaderPoint, point: LoaderPoint
) -> tuple[LoaderPoint, LoaderPoint, bool]:
    """``best`` and ``point`` timed again, back to back (best first): each as the faster of
    its two windows (interference only ever slows a loader down), and whether ``point``
    gains on ``best``, in the new pair (a slow spell falls on both alike) or between the
    faster windows."""
    best_again = _measure_loader(workload, dataset, batch_size, best.num_workers)
    point_again = _measure_loader(workload, dataset, batch_size, point.num_workers)
    faster_best = max(best, best_again, key=lambda p: p.samples_per_s)
    faster_point = max(point, point_again, key=lambda p: p.samples_per_s)
    gained = (
        point_again.samples_per_s > SCALING_GAIN * best_again.samples_per_s
        or faster_point.samples_per_s > SCALING_GAIN * faster_best.samples_per_s
    )
    return faster_best, faster_point, gained


def profile_large_batch(
    workload: Workload,
    dataset: Any,
    plan: ProfilePlan,
    points: Sequence[LoaderPoint],
    sample_bytes: int,
    fewest: bool = False,
) -> tuple[int, LoaderPoint] | None:
    """A worker count of the sweep timed again at a larger batch of the space (see
    :func:`large_batch_size`): with the two, the predictor splits a batch's cost into a part per
    sample and a part per batch. The fastest count whose epoch holds enough larger batches (the
    main process's share, the loader's ceiling), or with ``fewest`` the fewest workers (a
    worker's own share). None when no such batch fits."""
    with_workers = [p for p in points if p.num_workers]
    if fewest:
        with_workers = sorted(with_workers, key=lambda p: p.num_workers)[:1]
    length = _length(dataset)
    for point in sorted(with_workers, key=lambda p: p.samples_per_s, reverse=True):
        batch = large_batch_size(plan, point, length, sample_bytes)
        if batch is None:
            continue
        try:
            return batch, _measure_loader(workload, dataset, batch, point.num_workers)
        except RuntimeError:
            return None
    return None


def profile_prefetch(
    workload: Workload,
    dataset: Any,
    plan: ProfilePlan,
    points: Sequence[LoaderPoint],
    sample_bytes: int,
) -> tuple[LoaderPoint, LoaderPoint] | None:
    """The fastest worker count of the sweep whose epoch holds enough batches, timed again
    with the sweep's one batch ahead per worker and then with :data:`AHEAD_PREFETCH`: with
    one ahead a worker that has delivered waits for the main process to take its batch, in
    order, before it is given the next (the predictor's wait per worker). The pair is timed
    back to back, not against the sweep's point: slow-storage's 24 workers read 3,547 and
    3,961 samples/s in two profiles' sweeps and 4,735-4,787 alone. None when no count fits
    the epoch or the memory budget."""
    length = _length(dataset)
    batch = plan.loader_batch_size
    budget = plan.memory_budget_bytes
    for point in sorted(
        (p for p in points if p.num_workers), key=lambda p: p.samples_per_s, reverse=True
    ):
        workers = point.num_workers
        # The warm-up skips the backlog of every worker's batches ahead; as many are in
        # flight while the window runs, which needs a round of workers and two batches more.
        if length is not None and ((2 * AHEAD_PREFETCH + 1) * workers + 3) * batch > length:
            continue
        extra = workers * (AHEAD_PREFETCH - SWEEP_PREFETCH) * batch * sample_bytes
        if (
            budget is not None
            and point.memory_bytes is not None
            and point.memory_bytes + extra > MEMORY_MARGIN * budget
        ):
            continue
        try:
            return (
                _measure_loader(workload, dataset, batch, workers, SWEEP_PREFETCH),
                _measure_loader(workload, dataset, batch, workers, AHEAD_PREFETCH),
            )
        except RuntimeError:
            return None
    return None


def large_batch_size(
    plan: ProfilePlan, best: LoaderPoint, length: int | None, sample_bytes: int
) -> int | None:
    """The largest batch of the space at 2 to :data:`LARGE_BATCH_FACTOR` times the sweep's that
    an epoch of ``length`` samples holds enough of for ``best``'s workers, whose batches in
    flight stay within :data:`LARGE_BATCH_BYTES` and the memory budget, and whose timing takes
    :data:`LARGE_BATCH_S` at most at ``best``'s rate; None if none does."""
    workers, small = best.num_workers, plan.loader_batch_size
    # Each worker and the main process hold a batch or two of the larger size.
    in_flight = 2 * (workers + 1) * sample_bytes
    larger = [
        b
        for b in plan.batch_sizes
        if 2 * small <= b <= LARGE_BATCH_FACTOR * small
        and (length is None or (2 * workers + 3) * b <= length)
        and in_flight * b <= LARGE_BATCH_BYTES
        and _loader_seconds(best, b) <= LARGE_BATCH_S
    ]
    if not larger:
        return None
    batch = max(larger)
    budget = plan.memory_budget_bytes
    if (
        budget is not None
        and best.memory_bytes is not None
        and best.memory_bytes + in_flight * (batch - small) > MEMORY_MARGIN * budget
    ):
        return None
    return batch


def _loader_seconds(point: LoaderPoint, batch: int) -> float:
    """Seconds :func:`_measure_loader` takes with ``point``'s workers at ``batch`` if they
    read at ``point``'s rate: the warm-up's round, then a window of a round and two batches
    (at least :data:`LOADER_WINDOW_S`)."""
    workers, rate = point.num_workers, point.samples_per_s
    return (workers + 1) * batch / rate + max(LOADER_WINDOW_S, (workers + 2) * batch / rate)


def _scaled_in_proportion(points: Sequence[LoaderPoint]) -> bool:
    """The last worker count gained at least half of what its share of workers promised over
    the count before (4x the workers, at least 2.5x the samples/s): a loader that scales so
    is not bound by the CPU, however busy the CPU reads (reads that wait hold workers, and
    their CPU time is spent, not needed)."""
    if len(points) < 2 or points[-2].num_workers == 0:
        return False
    before, last = points[-2], points[-1]
    promised = last.num_workers / before.num_workers
    return last.samples_per_s >= before.samples_per_s * (1 + PROPORTIONAL_SHARE * (promised - 1))


def _loader_saturated(
    points: Sequence[LoaderPoint], cpu_count: int, next_workers: int, plan: ProfilePlan
) -> bool:
    """More workers cannot help: the CPU is busy (and the last count did not scale in
    proportion), or their memory would pass the budget."""
    last = points[-1]
    if last.num_workers == 0:
        return False
    if (
        next_workers > last.num_workers
        and _cores_busy(last, cpu_count)
        and next_workers > cpu_count
        and not _scaled_in_proportion(points)
    ):
        return True
    budget = plan.memory_budget_bytes
    if budget is None or last.memory_bytes is None:
        return False
    # What each worker adds (the slope over the counts measured; with one count, its
    # process's share): the main process's own memory (the model, the step's batches) is
    # not multiplied by the workers.
    per_worker = _worker_memory(points) or last.memory_bytes / (last.num_workers + 1)
    expected = last.memory_bytes + per_worker * (next_workers - last.num_workers)
    return expected > MEMORY_MARGIN * budget


def _worker_memory(points: Sequence[LoaderPoint]) -> int:
    """Memory one worker adds: the slope between the smallest and largest worker counts."""
    measured = [p for p in points if p.memory_bytes is not None]
    if len(measured) < 2:
        return 0
    low, high = measured[0], measured[-1]
    if high.num_workers == low.num_workers:
        return 0
    slope = ((high.memory_bytes or 0) - (low.memory_bytes or 0)) / (
        high.num_workers - low.num_workers
    )
    return max(0, int(slope))


def extended_workers(points: Sequence[LoaderPoint], grid_max: int) -> list[int]:
    """Worker counts beyond ``grid_max`` up to the loader's best: worth searching."""
    if not points:
        return []
    best = max(points, key=lambda p: p.samples_per_s)
    return [p.num_workers for p in points if grid_max < p.num_workers <= best.num_workers]


def _length(dataset: Any) -> int | None:
    """``len(dataset)`` where it has one: what bounds the batches a loader timing can pull."""
    return len(dataset) if hasattr(dataset, "__len__") else None


def _epoch_length(dataset: Any) -> int | None:
    """Samples per epoch of a map-style dataset; None for an iterable one (its workers each
    read what the dataset gives them: its epoch is not a count of batches shared out)."""
    return None if isinstance(dataset, IterableDataset) else _length(dataset)


def profile(workload: Workload, device: torch.device, plan: ProfilePlan) -> Profile:
    """Measure the step alone and the loader alone (see the module's description)."""
    started = time.perf_counter()
    budget_s = plan.step_budget_s + plan.loader_budget_s
    fresh_heap = plan.fresh_heap and device.type == "cpu" and glibc_malloc()
    if plan.retain_freed_memory and not fresh_heap:
        retain_freed_memory()
    torch.manual_seed(0)
    dataset = workload.dataset()
    cpu_count = os.cpu_count() or 1
    source = step_batches(workload, dataset, plan)
    heap: list[HeapPoint] = []
    if fresh_heap:
        collect_setup_garbage()
        heap_started = time.perf_counter()
        heap = profile_fresh_heap(workload, device, source, plan)
        # Its seconds come out of the step's budget: the profile keeps to --profile-seconds.
        plan = dataclasses.replace(
            plan, step_budget_s=max(0.0, plan.step_budget_s - (time.perf_counter() - heap_started))
        )
        retain_freed_memory()  # set already unless the step ran out of memory
    step, source = profile_step(workload, dataset, device, plan, source)
    step_threads = profile_step_threads(workload, device, source, step, plan)
    fork_copy = (
        profile_fork_copy(workload, device, source, plan)
        if plan.fork_copy and device.type == "cpu"
        else None
    )
    accumulation = (
        profile_accumulation(workload, device, source, plan) if plan.accumulation else None
    )
    collate = source.collate_seconds(plan.loader_batch_size)
    sample_bytes = source.sample_bytes()
    del source
    collect_setup_garbage()  # else a worker forked while a collection was due runs it
    loader = profile_loader(workload, dataset, plan, cpu_count)
    large = profile_large_batch(workload, dataset, plan, loader, sample_bytes)
    counts = [p.num_workers for p in loader if p.num_workers]
    fewest = (
        large
        if large and counts and large[1].num_workers == min(counts)
        else profile_large_batch(workload, dataset, plan, loader, sample_bytes, fewest=True)
    )
    ahead = profile_prefetch(workload, dataset, plan, loader, sample_bytes)
    grid_max = max(plan.worker_counts)
    return Profile(
        device_type=device.type,
        cpu_count=cpu_count,
        step=step,
        step_threads=step_threads,
        default_threads=torch.get_num_threads() if device.type != "cuda" else None,
        loader=loader,
        memory=memory_models(step),
        loader_batch_size=plan.loader_batch_size,
        loader_large_batch_size=large[0] if large else None,
        loader_large_batch=large[1] if large else None,
        loader_fewest_workers_batch_size=fewest[0] if fewest else None,
        loader_fewest_workers=fewest[1] if fewest else None,
        loader_one_ahead=ahead[0] if ahead else None,
        loader_prefetch=ahead[1] if ahead else None,
        dataset_length=_epoch_length(dataset),
        collate_s_per_batch=collate,
        sample_bytes=sample_bytes,
        worker_memory_bytes=_worker_memory(loader),
        extra_workers=extended_workers(loader, grid_max),
        grid_max_workers=grid_max,
        retained_freed_memory=plan.retain_freed_memory or fresh_heap,
        fresh_heap=heap,
        fork_copy=fork_copy,
        accumulation=accumulation,
        duration_s=time.perf_counter() - started,
        budget_s=budget_s,
    )
