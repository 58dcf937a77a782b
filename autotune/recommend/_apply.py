"""Applying a recommendation in the user's own training script.

Example:
    A training loop with every recommended knob applied::

        rec = autotune.load_recommendation("best.json")
        loader = rec.dataloader(dataset, shuffle=True)
        model = rec.prepare_model(model)
        optimizer = rec.prepare_optimizer(torch.optim.AdamW(model.parameters(), lr=1e-3))
        for inputs, target in rec.batches(loader):
            with rec.autocast():
                loss = loss_fn(rec.call_model(model, inputs), target)
            rec.backward(loss, optimizer)

    A Hugging Face model, whose dict batches hold the labels, computes its own loss::

        for batch in rec.batches(loader):
            with rec.autocast():
                loss = rec.call_model(model, batch).loss      # model(**batch)
            rec.backward(loss, optimizer)
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from autotune.errors import ConfigError
from autotune.measure import (
    TrainingStep,
    call_model,
    dataloader_takes_in_order,
    use_expandable_segments,
    with_implementation,
)
from autotune.recommend._export import dataloader_kwargs
from autotune.recommend._schema import read_config, validate_recommendation
from autotune.space import Config
from autotune.workload import ModelInputs


class Recommendation:
    """A loaded recommendation: the configuration, the device it applies to, and the document.

    Build one with :func:`load_recommendation`. The configuration and device cannot be
    reassigned; the only state is the gradient scaler and micro-step count of :meth:`backward`,
    kept by the :class:`~autotune.measure.TrainingStep` that the measured trials ran.
    """

    __slots__ = ("_config", "_device", "_document", "_step")

    def __init__(self, config: Config, device: torch.device, document: dict[str, Any]) -> None:
        self._config = config
        self._device = device
        self._document = document
        # The same step code the trials were measured with.
        self._step = TrainingStep(config, device)

    @property
    def config(self) -> Config:
        return self._config

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def document(self) -> dict[str, Any]:
        """The validated recommendation document, as loaded."""
        return self._document

    def __repr__(self) -> str:
        return f"Recommendation(device={str(self._device)!r}, config={self._config!r})"

    def dataloader(self, dataset: Any, **overrides: Any) -> DataLoader[Any]:
        """A ``DataLoader`` over ``dataset`` with the recommended settings.

        Keyword arguments override the recommendation (``shuffle``, ``collate_fn``, or a
        knob). Overriding ``num_workers`` to 0 also drops the worker-only settings, unless
        they are given too. Pinned memory only speeds up copies to a GPU, so it is off when
        the device is the CPU. ``in_order=False`` hands out each batch as soon as a worker has
        it, so samples come in a different order within a window of
        ``num_workers * prefetch_factor`` batches (the epoch still holds each sample once).
        """
        kwargs = dataloader_kwargs(self._config)
        if self._device.type != "cuda":
            kwargs["pin_memory"] = False
        kwargs.update(overrides)
        if kwargs.get("num_workers", 0) == 0:
            for worker_only in ("persistent_workers", "prefetch_factor", "in_order"):
                if worker_only not in overrides:
                    kwargs.pop(worker_only, None)
        if kwargs.get("in_order") is False and not dataloader_takes_in_order():
            raise ConfigError(
                "the recommendation sets the DataLoader's in_order=False, which this torch's "
                "DataLoader does not take (torch 2.6 and later do); upgrade torch or pass "
                "in_order=True"
            )
        if kwargs.get("in_order") is True and not dataloader_takes_in_order():
            kwargs.pop("in_order")  # PyTorch's own behaviour, which an older DataLoader has
        return DataLoader(dataset, **kwargs)

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Move ``model`` to the device, in channels_last when recommended, set the backend
        flags (``cudnn.benchmark``, TF32, CUDA's expandable segments: call it before anything
        else puts tensors on the GPU) and glibc's malloc thresholds
        (``retain_freed_memory``, for this process and the DataLoader workers it starts
        afterwards) the recommendation was measured with, and ``torch.compile`` it with the
        recommended mode; TF32 left unset in the recommendation stays as PyTorch (or your
        script) has it.

        Train the returned model. When it is compiled, its ``state_dict`` keys start with
        ``_orig_mod.``: save the module you passed in instead.
        """
        return self._step.prepare_model(model)

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Your optimizer rebuilt with the recommended implementation (``fused=True`` or
        ``foreach=True``): the same class, parameter groups and hyper-parameters; returned
        as it is when the recommendation leaves it (``optimizer_impl`` ``default``). Call it
        before the first step and before building a learning-rate scheduler on it."""
        try:
            return with_implementation(optimizer, self._config.optimizer_impl)
        except ValueError as error:
            raise ConfigError(f"optimizer_impl={self._config.optimizer_impl}: {error}") from None

    def call_model(self, model: Any, inputs: Any, style: ModelInputs = "auto") -> Any:
        """Call ``model`` as the trials did: a dict batch as keyword arguments
        (``model(**inputs)``), anything else as one argument; ``style`` is your workload's
        ``model_inputs``."""
        return call_model(model, inputs, style)

    def batches(self, loader: Iterable[Any]) -> Iterator[Any]:
        """The batches of ``loader`` (one epoch) on the device.

        4-D tensors are made channels_last when recommended. With ``device_prefetch`` on CUDA
        the next batch is copied on a side stream while the current one computes; otherwise
        each batch is copied when asked for, without blocking when memory is pinned.
        """
        return self._step.batches(loader)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast`` with the recommended dtype, or a context doing nothing."""
        return self._step.autocast()

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """The ``GradScaler`` fp16 needs (the same one :meth:`backward` uses); None otherwise."""
        return self._step.grad_scaler()

    def backward(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> bool:
        """Backward for one micro-batch; step and zero the gradients every
        ``grad_accum_steps`` micro-batches. Returns whether the optimizer stepped.

        The loss is divided by ``grad_accum_steps`` so the accumulated gradient is the mean
        over the effective batch, and scaled when fp16 needs a ``GradScaler``.
        """
        return self._step.backward(loss, optimizer)


def _read_document(source: str | os.PathLike[str] | Mapping[str, Any]) -> Any:
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source))
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"the recommendation file {str(path)!r} does not exist; "
            "pass the path of the JSON file autotune wrote"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise ConfigError(
            f"the recommendation file {str(path)!r} could not be read "
            f"({reason}); pass the path of the JSON file autotune wrote"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"the recommendation file {str(path)!r} is not valid JSON "
            f"({error.msg} at line {error.lineno}, column {error.colno}); "
            "pass the JSON file autotune wrote, unedited"
        ) from None


def _resolve_device(recommended: str, requested: str | None) -> torch.device:
    if requested is None:
        if recommended not in ("cpu", "cuda"):
            raise ConfigError(
                f"the recommendation was made for a {recommended!r} device, which "
                'autotune cannot apply; pass device="cpu" or "cuda"'
            )
        if recommended == "cuda" and not torch.cuda.is_available():
            raise ConfigError(
                "the recommendation was made for CUDA but no CUDA device is "
                'available here; pass device="cpu" to apply it on the CPU'
            )
        return torch.device(recommended)
    try:
        device = torch.device(requested)
    except (RuntimeError, ValueError):
        raise ConfigError(
            f'device={requested!r} is not a device; pass "cpu", "cuda" or "cuda:N"'
        ) from None
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f'device={requested!r} is not supported; pass "cpu", "cuda" or "cuda:N"')
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"device={requested!r} asks for CUDA but no CUDA device is available "
            'here; pass device="cpu"'
        )
    return device


def load_recommendation(
    source: str | os.PathLike[str] | Mapping[str, Any], device: str | None = None
) -> Recommendation:
    """Load and validate a recommendation from a JSON file's path or an already parsed dict.

    ``device`` overrides the device the recommendation was made for (``"cpu"``,
    ``"cuda:1"``); by default it is that device's type, which must be available here. A
    recommendation with ``expandable_segments`` sets CUDA's allocator for them here, so load
    it before anything starts CUDA.
    Raises :class:`~autotune.errors.ConfigError` with the reason when the file is missing,
    not JSON, or not a valid recommendation.
    """
    document = _read_document(source)
    validate_recommendation(document)
    config = read_config(document["config"], "config")
    resolved = _resolve_device(document["device"]["type"], device)
    if config.expandable_segments and resolved.type == "cuda":
        # The allocator reads it when CUDA starts: as early as autotune gets to set it.
        use_expandable_segments()
    return Recommendation(config, resolved, document)
