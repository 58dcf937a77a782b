"""The training step a recommendation prescribes: backend flags, torch.compile, batches on the
device, how the model is called, autocast, backward with gradient scaling and accumulation.

One piece of code serves both the measured loop (:mod:`autotune.measure._loop`) and the loop
users get from ``load_recommendation`` (``rec.batches``, ``rec.autocast``, ``rec.backward``), so
what was measured is what users run.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch

from autotune.measure._batches import DevicePrefetcher, to_device
from autotune.measure._cuda_allocator import use_expandable_segments
from autotune.measure._host_allocator import retain_freed_memory
from autotune.space import Config
from autotune.workload import ModelInputs, StepHooks, Workload

_AFTER_LAST_BATCH = object()


def autocast_dtype(config: Config) -> torch.dtype | None:
    return {"off": None, "fp16": torch.float16, "bf16": torch.bfloat16}[config.amp]


def set_tf32(enabled: bool) -> None:
    """TF32 on or off for every fp32 matmul and cuDNN convolution.

    torch 2.9 replaced the ``allow_tf32`` flags by ``fp32_precision`` ("tf32" / "ieee") and
    refuses reads of the old flags once the new ones are set, so only one API is ever used.
    """
    precision = "tf32" if enabled else "ieee"
    try:
        torch.backends.cuda.matmul.fp32_precision = precision
        torch.backends.cudnn.conv.fp32_precision = precision  # type: ignore[attr-defined]
    except AttributeError:  # torch before 2.9
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


def apply_backend_flags(config: Config, device: torch.device) -> None:
    """Set the process-wide settings the configuration chose: glibc's malloc thresholds when
    it retains freed memory, the intra-op thread count, the CUDA backend flags and the
    caching allocator's expandable segments; ``tf32=None`` and ``intra_op_threads=None`` leave
    PyTorch's own defaults (and anything the user set) untouched."""
    if config.retain_freed_memory:
        retain_freed_memory()
    if config.intra_op_threads is not None:
        torch.set_num_threads(config.intra_op_threads)
    if device.type != "cuda":
        return
    torch.backends.cudnn.benchmark = config.cudnn_benchmark
    if config.expandable_segments:
        use_expandable_segments()
    if config.tf32 is not None:
        set_tf32(config.tf32)


def call_model(model: Any, inputs: Any, style: ModelInputs = "auto", batch_idx: int = 0) -> Any:
    """Call ``model`` on one batch's inputs, as Hugging Face's ``Trainer`` does.

    A dict (any mapping) is passed as keyword arguments, ``model(**inputs)``; anything else as
    one argument, ``model(inputs)``. ``style`` ``"kwargs"`` insists on a dict and
    ``"positional"`` passes even a dict as one argument; ``"training_step"`` calls the model's
    own ``training_step(inputs, batch_idx)``, as Lightning's ``Trainer`` does.

    Example:
        >>> call_model(lambda x, y: x + y, {"x": 1, "y": 2})
        3
        >>> call_model(len, {"x": 1, "y": 2}, "positional")
        2
    """
    if style == "positional":
        return model(inputs)
    if style == "training_step":
        return model.training_step(inputs, batch_idx)
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if style == "kwargs":
        raise TypeError(
            f"model_inputs='kwargs' passes a dict as keyword arguments, but this "
            f"input batch is a {type(inputs).__name__}; make the dataset (or "
            "collate_fn) yield dicts or set model_inputs='auto'"
        )
    return model(inputs)


def returned_loss(output: Any) -> torch.Tensor:
    """The loss a model computed itself: ``output.loss`` (a Hugging Face ``ModelOutput``),
    ``output["loss"]``, or the output when it is a single-element tensor."""
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, Mapping):
        loss = output.get("loss")
    if loss is None and isinstance(output, torch.Tensor) and output.numel() == 1:
        loss = output
    if not isinstance(loss, torch.Tensor):
        raise TypeError(
            f"Workload(loss=None) expects the model to return its loss, but its "
            f"{type(output).__name__} output has no 'loss' tensor; give the model "
            "the labels (e.g. a 'labels' key in each batch) or pass a loss function"
        )
    return loss


def split_batch(batch: Any, model_computes_loss: bool) -> tuple[Any, Any]:
    """``(inputs, target)`` of one batch: ``(batch, None)`` when the model computes the loss
    from a batch that holds its labels, else the batch's first two items."""
    if model_computes_loss:
        return batch, None
    return batch[0], batch[1]


def train_step(
    workload: Workload,
    training: TrainingStep,
    model: Any,
    optimizer: torch.optim.Optimizer,
    batch: Any,
    batch_idx: int = 0,
) -> torch.Tensor:
    """One micro-step of ``batch`` (already on the device): the framework's hooks, forward and
    loss under autocast, backward, the optimizer on accumulation boundaries. Returns the loss.

    The measured loop and the profile's step benches both step through this.
    """
    training.hooks.before_step(batch, batch_idx)
    with training.autocast():
        loss = forward_loss(workload, model, batch, batch_idx)
    training.backward(loss, optimizer)
    training.hooks.after_step(loss, batch, batch_idx)
    return loss


def forward_loss(workload: Workload, model: Any, batch: Any, batch_idx: int = 0) -> torch.Tensor:
    """The forward pass and loss of one batch already on the device, as the workload defines
    them (its device transform, how its model takes inputs, its loss or the model's own).

    The measured loop and the profile's step-alone sweep both call this (under autocast).
    """
    loss_fn = workload.loss
    inputs, target = split_batch(batch, model_computes_loss=loss_fn is None)
    if workload.device_transform is not None:
        inputs = workload.device_transform(inputs)
    output = call_model(model, inputs, workload.model_inputs, batch_idx)
    return returned_loss(output) if loss_fn is None else loss_fn(output, target)


class WaitClock:
    """Host seconds spent inside the DataLoader's ``next()`` and in host-to-device copies.

    On CUDA the host runs ahead of the device: a ``next()`` that returns while the device is
    still working on the steps already queued cost the device nothing. With ``device_busy``
    set (a check that does not synchronise), such a ``next()``'s time is counted in
    ``overlapped_s`` as well: ``loader_s - overlapped_s`` is what the device may have waited
    (an upper bound: a ``next()`` during which the device fell idle counts whole).
    """

    __slots__ = ("copy_s", "device_busy", "loader_s", "overlapped_s")

    def __init__(self) -> None:
        self.loader_s = 0.0
        self.copy_s = 0.0
        self.overlapped_s = 0.0
        self.device_busy: Callable[[], bool] | None = None


class _TimedLoader:
    """An iterator over the loader that adds the time spent in its ``next()`` to a clock."""

    def __init__(self, iterator: Iterator[Any], clock: WaitClock) -> None:
        self._iterator = iterator
        self._clock = clock

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        started = time.perf_counter()
        try:
            return next(self._iterator)
        finally:
            elapsed = time.perf_counter() - started
            self._clock.loader_s += elapsed
            busy = self._clock.device_busy
            if busy is not None and busy():
                self._clock.overlapped_s += elapsed


class TrainingStep:
    """Batches, autocast and backward for one configuration on one device.

    The only state is the gradient scaler (fp16) and the micro-step count of gradient
    accumulation. With ``max_grad_norm`` the gradients' total norm is clipped to it before
    every optimizer step (unscaled first under fp16), as the frameworks' trainers do.
    :attr:`hooks` is a framework's own per-step work around backward and the optimizer's step
    (see :class:`~autotune.workload.StepHooks`); a plain workload's do nothing.
    """

    def __init__(
        self, config: Config, device: torch.device, max_grad_norm: float | None = None
    ) -> None:
        self.config = config
        self.device = device
        self.max_grad_norm = max_grad_norm
        self._dtype = autocast_dtype(config)
        self._scaler: torch.amp.GradScaler | None = None
        self._micro_steps = 0
        self.hooks = StepHooks()

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Set the backend flags, move ``model`` to the device, channels_last if chosen, and
        ``torch.compile`` it with the chosen mode (compilation itself happens on the first
        call)."""
        apply_backend_flags(self.config, self.device)
        model = model.to(self.device)
        if self.config.channels_last:
            # Module.to accepts memory_format; torch's type stubs do not list it.
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        if self.config.compile != "off":
            mode = None if self.config.compile == "default" else self.config.compile
            model = torch.compile(model, mode=mode)  # type: ignore[assignment]
        return model

    @property
    def prefetches(self) -> bool:
        return self.config.device_prefetch and self.device.type == "cuda"

    def batches(self, loader: Iterable[Any], clock: WaitClock | None = None) -> Iterator[Any]:
        """One epoch of ``loader``'s batches on the device.

        With ``device_prefetch`` on CUDA the next batch is copied on a side stream while the
        current one computes; otherwise each batch is copied when asked for, without blocking
        when memory is pinned. A ``clock`` receives the time spent waiting for the loader apart
        from the time spent copying (which on CUDA can include waiting for the device).
        """
        source: Iterator[Any] = iter(loader)
        if clock is not None:
            source = _TimedLoader(source, clock)
        if self.prefetches:
            # DevicePrefetcher reads one batch ahead and expects an endless source: a marker
            # after the last batch ends the epoch without losing the batch it holds.
            endless = itertools.chain(source, itertools.repeat(_AFTER_LAST_BATCH))
            for batch in DevicePrefetcher(endless, self.device, self.config.channels_last):
                if batch is _AFTER_LAST_BATCH:
                    return
                yield batch
            return
        non_blocking = self.config.pin_memory and self.device.type == "cuda"
        channels_last = self.config.channels_last
        for host_batch in source:
            if clock is None:
                yield to_device(host_batch, self.device, channels_last, non_blocking)
                continue
            started = time.perf_counter()
            batch = to_device(host_batch, self.device, channels_last, non_blocking)
            clock.copy_s += time.perf_counter() - started
            yield batch

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast`` with the configuration's dtype, or a context doing nothing."""
        if self._dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self._dtype)

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """The ``GradScaler`` fp16 needs (the one :meth:`backward` uses); None otherwise."""
        if self.config.amp != "fp16":
            return None
        if self._scaler is None:
            self._scaler = torch.amp.GradScaler(self.device.type)
        return self._scaler

    def backward(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> bool:
        """Backward for one micro-batch; step and zero the gradients every
        ``grad_accum_steps`` micro-batches. Returns whether the optimizer stepped.

        The loss is divided by ``grad_accum_steps`` so the accumulated gradient is the mean
        over the effective batch, and scaled when fp16 needs a ``GradScaler``.
        """
        steps = self.config.grad_accum_steps
        scaled = loss / steps if steps > 1 else loss
        scaler = self.grad_scaler()
        self.hooks.before_backward(loss)
        if scaler is not None:
            scaler.scale(scaled).backward()
        else:
            scaled.backward()
        self.hooks.after_backward()
        self._micro_steps += 1
        if self._micro_steps % steps:
            return False
        if self.max_grad_norm is not None:
            if scaler is not None:
                scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(
                [p for group in optimizer.param_groups for p in group["params"]],
                self.max_grad_norm,
            )
        self.hooks.before_optimizer_step(optimizer)
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        self.hooks.after_optimizer_step(optimizer)
        optimizer.zero_grad(set_to_none=True)
        return True
