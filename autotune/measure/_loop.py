"""The measured training loop: warm-up, a timed window, and what the window saw."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from autotune.measure._batches import (
    DevicePrefetcher,
    EndlessBatches,
    batch_size_of,
    first_tensor,
    to_device,
)
from autotune.space import Config
from autotune.workload import Workload

ProgressSink = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class MeasurePlan:
    """How long to warm up and to measure.

    The timed window is the longer of ``min_steps`` and ``min_seconds``; warm-up lasts at least
    ``warmup_steps`` and until every loader worker has delivered a batch.
    """

    warmup_steps: int = 3
    min_steps: int = 10
    min_seconds: float = 3.0
    progress_interval_s: float = 0.5
    seed: int = 0


@dataclass
class WindowMetrics:
    samples_per_s: float
    step_time_median_ms: float
    step_time_p90_ms: float
    data_wait_fraction: float
    steps: int
    warmup_steps: int
    window_s: float
    losses_finite: bool
    peak_memory_allocated_bytes: int | None
    peak_memory_reserved_bytes: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class NonFiniteLoss(Exception):
    """A loss became NaN or infinite: the configuration does not train."""


def build_loader(workload: Workload, config: Config, dataset: Any) -> DataLoader[Any]:
    kwargs: dict[str, Any] = {"shuffle": not isinstance(dataset, IterableDataset)}
    kwargs.update(workload.dataloader_kwargs)
    kwargs.update(
        batch_size=config.batch_size,
        num_workers=config.num_workers,
        pin_memory=config.pin_memory,
        drop_last=True,
        collate_fn=workload.collate_fn,
    )
    if config.num_workers > 0:
        kwargs["persistent_workers"] = config.persistent_workers
        if config.prefetch_factor is not None:
            kwargs["prefetch_factor"] = config.prefetch_factor
    return DataLoader(dataset, **kwargs)


def autocast_dtype(config: Config) -> torch.dtype | None:
    return {"off": None, "fp16": torch.float16, "bf16": torch.bfloat16}[config.amp]


def apply_backend_flags(config: Config, device: torch.device) -> None:
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = config.cudnn_benchmark
        torch.backends.cuda.matmul.allow_tf32 = config.tf32
        torch.backends.cudnn.allow_tf32 = config.tf32


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


class TrainingLoop:
    """One configuration of one workload, ready to step; built inside the trial process."""

    def __init__(self, workload: Workload, config: Config, device: torch.device) -> None:
        self.workload = workload
        self.config = config
        self.device = device
        apply_backend_flags(config, device)
        model = workload.model().to(device)
        if config.channels_last:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        model.train()
        self.model = model
        self.optimizer = workload.optimizer(model.parameters())
        self.scaler = torch.amp.GradScaler(device.type) if config.amp == "fp16" else None
        self.dtype = autocast_dtype(config)
        self.loader = build_loader(workload, config, workload.dataset())
        host_batches: Iterator[Any] = EndlessBatches(self.loader)
        self.prefetching = config.device_prefetch and device.type == "cuda"
        self.batches: Iterator[Any] = (
            DevicePrefetcher(host_batches, device, config.channels_last)
            if self.prefetching else host_batches
        )
        # Accumulated on the device so checking finiteness adds no synchronisation per step.
        self.all_finite = torch.ones((), dtype=torch.bool, device=device)
        self._micro_step = 0

    def next_batch(self) -> Any:
        batch = next(self.batches)
        if self.prefetching:
            return batch
        return to_device(batch, self.device, self.config.channels_last, self.config.pin_memory)

    def step(self, batch: Any) -> int:
        """One micro-step (forward, backward, optimizer on accumulation boundaries)."""
        inputs, target = batch[0], batch[1]
        if self.workload.device_transform is not None:
            inputs = self.workload.device_transform(inputs)
        autocast = (
            torch.autocast(self.device.type, dtype=self.dtype)
            if self.dtype is not None else contextlib.nullcontext()
        )
        with autocast:
            output = self.model(inputs)
            loss = self.workload.loss(output, target)
        self.all_finite &= torch.isfinite(loss.detach()).all()
        scaled = loss / self.config.grad_accum_steps
        if self.scaler is not None:
            self.scaler.scale(scaled).backward()
        else:
            scaled.backward()
        self._micro_step += 1
        if self._micro_step % self.config.grad_accum_steps == 0:
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return batch_size_of(batch)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def check_finite(self) -> None:
        if not bool(self.all_finite.item()):
            raise NonFiniteLoss("the loss became NaN or infinite")


def input_batch_ndim(workload: Workload, dataset: Any) -> int:
    """Dimensions of one batch's input tensor (a sample's plus the batch dimension)."""
    sample = next(iter(dataset)) if isinstance(dataset, IterableDataset) else dataset[0]
    inputs = sample[0] if isinstance(sample, (list, tuple)) else sample
    if workload.collate_fn is not None:
        collated = workload.collate_fn([sample])
        inputs = collated[0] if isinstance(collated, (list, tuple)) else collated
        tensor = first_tensor(inputs)
        return int(tensor.dim()) if tensor is not None else 0
    tensor = first_tensor(inputs)
    return int(tensor.dim()) + 1 if tensor is not None else 0


def measure(
    workload: Workload,
    config: Config,
    device: torch.device,
    plan: MeasurePlan,
    progress: ProgressSink | None = None,
) -> WindowMetrics:
    """Train ``workload`` with ``config`` and time a steady-state window.

    Raises :class:`NonFiniteLoss` when a loss was NaN/inf; errors from the workload propagate.
    """
    torch.manual_seed(plan.seed)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    loop = TrainingLoop(workload, config, device)
    warmup = max(plan.warmup_steps, config.num_workers + 1)
    for _ in range(warmup):
        loop.step(loop.next_batch())
    loop.synchronize()
    loop.check_finite()
    if progress is not None:
        progress({"event": "warmed_up", "warmup_steps": warmup})

    step_times: list[float] = []
    waits = 0.0
    samples = 0
    start = time.perf_counter()
    last_report = start
    previous = start
    while True:
        before_data = time.perf_counter()
        batch = loop.next_batch()
        waits += time.perf_counter() - before_data
        samples += loop.step(batch)
        now = time.perf_counter()
        step_times.append(now - previous)
        previous = now
        elapsed = now - start
        if len(step_times) >= plan.min_steps and elapsed >= plan.min_seconds:
            break
        if progress is not None and now - last_report >= plan.progress_interval_s:
            last_report = now
            progress({"event": "progress", "steps": len(step_times),
                      "samples_per_s": samples / elapsed})
    loop.synchronize()
    window = time.perf_counter() - start
    loop.check_finite()
    cuda = device.type == "cuda"
    return WindowMetrics(
        samples_per_s=samples / window,
        step_time_median_ms=statistics.median(step_times) * 1000,
        step_time_p90_ms=_percentile(step_times, 0.9) * 1000,
        data_wait_fraction=min(1.0, waits / window),
        steps=len(step_times),
        warmup_steps=warmup,
        window_s=window,
        losses_finite=True,
        peak_memory_allocated_bytes=int(torch.cuda.max_memory_allocated(device)) if cuda else None,
        peak_memory_reserved_bytes=int(torch.cuda.max_memory_reserved(device)) if cuda else None,
    )
