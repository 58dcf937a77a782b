"""The training loop a trial steps: one configuration's model, optimizer and loader, ready to step.

The step itself (batches on the device, autocast, backward) is :class:`TrainingStep`, the same
code ``load_recommendation`` hands users. What this module adds is only timing: two clock reads
per step, and the loader's ``next()`` timed apart from the copy to the device. The warm-up
(:mod:`autotune.measure._warmup`), the timed window (:mod:`autotune.measure._window`) and the
epoch start's amortisation (:mod:`autotune.measure._epoch_start`) drive it, and
:func:`autotune.measure.measure` composes them.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from autotune.measure._batches import batch_size_of, first_tensor
from autotune.measure._cuda_graphs import GraphWatch
from autotune.measure._distributed import (
    rank0_decides,
    shard_dataset,
    shard_loader_kwargs,
    wrap_model,
)
from autotune.measure._optimizer import with_implementation
from autotune.measure._step import TrainingStep, WaitClock, train_step
from autotune.space import Config
from autotune.workload import Workload

ProgressSink = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class MeasurePlan:
    """How long to warm up and to measure.

    The timed window is the longer of ``min_steps`` and ``min_seconds``, and holds whole
    rounds of the loader's workers (a batch from each), two at least; an epoch of at most
    :data:`~autotune.measure._window.WHOLE_EPOCH_ROUNDS` rounds (or ``min_steps`` steps) is
    timed whole: the window holds as many epochs' worth of steps as ``min_seconds`` needs (and
    ``min_steps``, up to one epoch's steps), from wherever the warm-up ended. Warm-up lasts at
    least ``warmup_steps`` and one step per loader worker plus one, then until the batches the
    workers prefetched at start-up are used up and the wait for data has settled (or
    ``max_warmup_s`` has passed).
    """

    warmup_steps: int = 3
    min_steps: int = 10
    min_seconds: float = 3.0
    progress_interval_s: float = 0.5
    seed: int = 0
    max_warmup_s: float = 5.0


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
        if not config.in_order:
            kwargs["in_order"] = False
    return DataLoader(shard_dataset(dataset), **shard_loader_kwargs(dataset, kwargs))


def _loader_length(loader: DataLoader[Any]) -> int | None:
    try:
        return len(loader) or None
    except TypeError:  # an iterable dataset without __len__
        return None


class TrainingLoop:
    """One configuration of one workload, ready to step; built inside the trial process.

    Each batch's wait for the loader is kept (:attr:`last_wait_s`), and the waits of the first
    steps of every epoch (:attr:`epoch_start_waits`): until the workers have refilled their
    queue, an epoch's start costs more than its steady state.
    """

    def __init__(self, workload: Workload, config: Config, device: torch.device) -> None:
        self.workload = workload
        self.config = config
        self.device = device
        self.training = TrainingStep(config, device, workload.max_grad_norm)
        module = workload.model()
        # In a DDP trial (one rank of several) the model all-reduces its gradients.
        self.model = wrap_model(self.training.prepare_model(module), device)
        self.model.train()
        self.optimizer = with_implementation(
            workload.optimizer(self.model.parameters()), config.optimizer_impl
        )
        if workload.step_hooks is not None:
            self.training.hooks = workload.step_hooks(module, self.optimizer)
        self.graphs = GraphWatch(config)
        self.loader = build_loader(workload, config, workload.dataset())
        self.steps_per_epoch = _loader_length(self.loader)
        #: Steps at the start of an epoch whose waits make up its start cost: one batch from
        #: each worker (after that round the workers are in their steady rhythm), at most a
        #: quarter of an epoch.
        self.start_steps = max(1, config.num_workers)
        if self.steps_per_epoch is not None:
            self.start_steps = max(1, min(self.start_steps, self.steps_per_epoch // 4))
        self.clock = WaitClock()
        #: Seconds the last batch waited for the loader (for an epoch's first batch, with the
        #: loader's iterator creation: worker start-up), and whether it began an epoch.
        self.last_wait_s = 0.0
        self.last_in_epoch_start = False
        #: Per epoch: the waits of its first :attr:`start_steps` batches.
        self.epoch_start_waits: list[list[float]] = []
        #: Per epoch, on a CPU: the host seconds of its first :attr:`start_steps` steps' own
        #: work (see :attr:`last_step_s`). Workers forked at an epoch's start share the main
        #: process's pages copy-on-write, so its first step faults in a private copy of every
        #: page of the heap it writes: a cost of the epoch's start that is no wait for data
        #: (evidence: benchmarks/log/).
        self.epoch_start_steps: list[list[float]] = []
        #: Host seconds of the last :meth:`step` (on CUDA, its launches, not the device's work).
        self.last_step_s = 0.0
        self._epoch: Iterator[Any] = iter(())
        self._epoch_step = 0
        # The sum of the losses since the last check, kept on the device and read only at the
        # check: no device synchronisation per step, and no tensor kept per step (NaN and
        # infinity survive a sum). Small tensors kept alive per step, among each step's large
        # freed ones, fragment the host's heap and slow every step (evidence: benchmarks/log/).
        self._loss_sum: torch.Tensor | None = None

    def next_batch(self) -> Any:
        """The next batch on the device, starting a new epoch when one ends."""
        waited = self._exposed_loader_s()
        try:
            batch = next(self._epoch)
            wait = self._exposed_loader_s() - waited
        except StopIteration:
            # The last next() of an epoch shuts its workers down (persistent_workers off): that
            # is part of what the new epoch's first batch waits for.
            ending = self._exposed_loader_s() - waited
            batch, wait = self._first_batch()
            wait += ending
        self.graphs.saw(batch)
        self.last_wait_s = wait
        self.last_in_epoch_start = self._epoch_step < self.start_steps
        if self.last_in_epoch_start:
            self.epoch_start_waits[-1].append(wait)
        self._epoch_step += 1
        return batch

    def _exposed_loader_s(self) -> float:
        """Loader time so far that did not overlap the device's queued work."""
        return self.clock.loader_s - self.clock.overlapped_s

    def _first_batch(self) -> tuple[Any, float]:
        started = time.perf_counter()
        copied, overlapped = self.clock.copy_s, self.clock.overlapped_s
        self._epoch = self.training.batches(self.loader, self.clock)
        try:
            batch = next(self._epoch)
        except StopIteration:
            raise RuntimeError(
                "the DataLoader yields no batch: the dataset is smaller than batch_size"
            ) from None
        self._epoch_step = 0
        self.epoch_start_waits.append([])
        self.epoch_start_steps.append([])
        return batch, (
            time.perf_counter()
            - started
            - (self.clock.copy_s - copied)
            - (self.clock.overlapped_s - overlapped)
        )

    def start_new_epoch(self) -> None:
        """End the current epoch early: the next batch starts a new one."""
        self._epoch = iter(())

    def step(self, batch: Any) -> int:
        """One micro-step (forward, backward, optimizer on accumulation boundaries)."""
        started = time.perf_counter()
        self.graphs.begin_step()
        loss = train_step(
            self.workload, self.training, self.model, self.optimizer, batch, self._epoch_step - 1
        )
        self._add_loss(loss.detach())
        self.last_step_s = time.perf_counter() - started
        if self.last_in_epoch_start and self.device.type == "cpu":
            self.epoch_start_steps[-1].append(self.last_step_s)
        return batch_size_of(batch)

    def _add_loss(self, loss: torch.Tensor) -> None:
        """Add one step's loss to the running sum, in place (no allocation that outlives it)."""
        if self._loss_sum is None:
            self._loss_sum = torch.zeros((), dtype=torch.float32, device=loss.device)
        # A single-element loss of any shape; backward has already refused anything larger.
        self._loss_sum.add_(loss.reshape(()))

    def decide(self, stop: bool) -> bool:
        """Whether to stop stepping: ``stop`` here, rank 0's in a DDP trial, so that every
        rank takes the same steps (see :mod:`autotune.measure._distributed`)."""
        return rank0_decides(stop, self.device)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def check_finite(self) -> None:
        """Raise :class:`NonFiniteLoss` when a loss since the last check was NaN or infinite
        (one synchronisation), and start a new sum."""
        total, self._loss_sum = self._loss_sum, None
        if total is not None and not bool(torch.isfinite(total)):
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


def collect_setup_garbage() -> None:
    """Run the garbage collector's full collection that setting up left due, before the
    warm-up and the DataLoader's first workers.

    Building the model, the optimizer and the loader leaves many new objects that survive, and
    Python's collector runs a full collection once those reach a quarter of the objects it
    already holds: with torch imported, a walk of some 350,000 objects, due some seconds into
    a process's life, i.e. inside a short window, though a long run pays it once. Workers
    forked while it is due inherit the collector's counts and run it themselves, and one
    paused worker stalls a loader that delivers in order; run between the warm-up and the
    window instead, its pause lets the workers fill their queues, which the window's first
    steps then take for free (evidence: benchmarks/log/). Collections that steady-state
    training causes still fall in the window.
    """
    gc.collect()
