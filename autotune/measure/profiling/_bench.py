"""Timing the training step alone: batches built from samples read once, and one timed window.

Every part of the profile that times the step (the sweeps, the host probes, the accumulation
probe) builds a :class:`StepBench` per precision and layout and feeds it batches collated from a
pool of samples read once (:class:`SampleBatches`), so the step runs without waiting for data.
It runs through :class:`~autotune.measure._step.TrainingStep` (autocast, backward, GradScaler,
channels_last): the same code a trial times.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from itertools import islice
from typing import Any

import psutil
import torch
from torch.utils.data import IterableDataset, default_collate

from autotune.measure._batches import batch_size_of, map_tensors, to_device
from autotune.measure._distributed import wrap_model
from autotune.measure._host_allocator import release_freed_memory
from autotune.measure._host_memory import peak_rss_bytes, reset_peak_rss
from autotune.measure._optimizer import with_implementation
from autotune.measure._step import TrainingStep, train_step
from autotune.measure.profiling._cpu_time import _cpu_seconds
from autotune.measure.profiling._lockstep import (
    AMP_MODES,
    COMPILE_MODES,
    OPTIMIZER_IMPLS,
    STEP,
    conductor,
    in_lockstep,
)
from autotune.measure.profiling._plan import ProfilePlan
from autotune.predict import StepPoint
from autotune.space import AmpMode, CompileMode, Config, OptimizerImpl
from autotune.workload import Workload

#: Timed window of one step point in one sweep: long enough for a few steps of a small batch,
#: short enough that the sweep reaches the grid's batches within its budget.
STEP_WINDOW_S = 0.15
#: Samples read once to build the step's batches (at most, and at most this many bytes of
#: them): larger batches repeat them, so the sweep reads the dataset once and holds little.
SAMPLE_POOL = 256
SAMPLE_POOL_BYTES = 64 * 2**20
#: Copies of a batch timed for its copy cost; the fastest counts, as for the step's windows,
#: since interference only ever slows a copy down.
COPY_REPEATS = 3


def _tensor_bytes(data: Any) -> int:
    """Bytes of every tensor in ``data`` (a sample or a batch, however nested)."""
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


class SampleBatches:
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


def step_batches(workload: Workload, dataset: Any, plan: ProfilePlan) -> SampleBatches:
    """The sample pool the step is timed on, for the plan's largest batch."""
    return SampleBatches(workload, dataset, max(plan.batch_sizes))


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is the device or the host running out of memory."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


class StepBench:
    """One precision and layout (and compile mode and optimizer implementation): the model,
    its optimizer and the step, built once."""

    def __init__(
        self,
        workload: Workload,
        device: torch.device,
        amp: AmpMode,
        channels_last: bool,
        compile_mode: CompileMode = "off",
        optimizer_impl: OptimizerImpl = "default",
    ) -> None:
        self.workload = workload
        self.device = device
        config = Config(
            amp=amp,
            channels_last=channels_last,
            compile=compile_mode,
            optimizer_impl=optimizer_impl,
        )
        self.training = TrainingStep(config, device, workload.max_grad_norm)
        module = workload.model()
        self.model = self.training.prepare_model(module)
        #: This bench's id among the ranks in a lockstep block (see :mod:`._lockstep`).
        self.ident: int | None = None
        conducting = conductor()
        if conducting is not None:
            self.ident = conducting.bench(
                self,
                AMP_MODES.index(amp),
                int(channels_last),
                COMPILE_MODES.index(compile_mode),
                OPTIMIZER_IMPLS.index(optimizer_impl),
                torch.get_num_threads(),
            )
        if in_lockstep():
            self.model = wrap_model(self.model, device)  # each backward all-reduces
        self.model.train()
        self.optimizer = with_implementation(
            workload.optimizer(self.model.parameters()), optimizer_impl
        )
        if workload.step_hooks is not None:
            self.training.hooks = workload.step_hooks(module, self.optimizer)
        self.channels_last = channels_last

    def on_device(self, batch: Any) -> Any:
        return to_device(batch, self.device, self.channels_last, non_blocking=False)

    def step(self, batch: Any) -> None:
        if self.ident is not None:
            conducting = conductor()
            if conducting is None:
                raise RuntimeError("a bench of every rank stepped outside its lockstep block")
            conducting.send(STEP, self.ident, batch_size_of(batch))
        train_step(self.workload, self.training, self.model, self.optimizer, batch)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def copied(bench: StepBench, host_batch: Any) -> tuple[Any, float]:
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


def timed_steps(bench: StepBench, batches: list[Any], window_s: float) -> tuple[list[float], float]:
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


def time_step(bench: StepBench, batches: list[Any], batch_size: int, deadline: float) -> StepPoint:
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
    times, wall = timed_steps(bench, batches, window_s)
    cpu = _cpu_seconds(process) - cpu_before
    memory = int(torch.cuda.max_memory_allocated(bench.device)) if cuda else peak_rss_bytes()
    return StepPoint(
        batch_size=batch_size,
        amp=bench.training.config.amp,
        channels_last=bench.channels_last,
        # The median step: a step the machine's other work preempted says nothing of this one.
        samples_per_s=batch_size / statistics.median(times),
        cpu_cores=None if cuda else cpu / wall,
        peak_memory_bytes=memory,
    )
