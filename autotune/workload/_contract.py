"""The workload contract: what a user's file returns for autotune to measure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.data import Dataset

ModelFactory = Callable[[], nn.Module]
DatasetFactory = Callable[[], "Dataset[Any]"]
LossFn = Callable[[Any, Any], torch.Tensor]
OptimizerFactory = Callable[[Any], torch.optim.Optimizer]
#: How an input batch is passed to the model: ``"auto"`` passes a dict as keyword arguments
#: (``model(**inputs)``, as Hugging Face's ``Trainer`` does) and anything else as one
#: argument; ``"kwargs"`` and ``"positional"`` force one of the two; ``"training_step"`` calls
#: the model's own ``training_step(batch, batch_idx)`` (a LightningModule's), whose returned
#: loss (a tensor, or a dict with ``"loss"``) is the loss.
ModelInputs = Literal["auto", "kwargs", "positional", "training_step"]
MODEL_INPUTS: tuple[ModelInputs, ...] = ("auto", "kwargs", "positional", "training_step")


class StepHooks:
    """A framework's own per-step work, run where the framework runs it around autotune's step.

    Each method does nothing here. A framework adapter (:mod:`autotune.workload.frameworks`)
    overrides them to call the framework's real objects: a Trainer's callbacks, its
    learning-rate scheduler and loss check, a LightningModule's hooks. The measured step
    calls them in this order, once per micro-batch, the optimizer's two around each step.
    """

    def before_step(self, batch: Any, batch_idx: int) -> None:
        """Before the forward pass of the batch (on the device)."""

    def before_backward(self, loss: torch.Tensor) -> None:
        """After the forward pass, before backward."""

    def after_backward(self) -> None:
        """After backward."""

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Before the optimizer steps (after clipping), on accumulation boundaries."""

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """After the optimizer stepped, before the gradients are zeroed."""

    def after_step(self, loss: torch.Tensor, batch: Any, batch_idx: int) -> None:
        """After the whole micro-step, with its loss."""


#: Builds a trial's :class:`StepHooks` from the module the workload's factory handed out (not
#: yet compiled or wrapped) and the optimizer over it.
StepHooksFactory = Callable[[nn.Module, torch.optim.Optimizer], StepHooks]


@dataclass
class Workload:
    """A model, a dataset and how to train it: the unit autotune measures.

    The dataset yields ``(input, target)`` pairs; each may be a tensor or a nested
    tuple/list/dict of tensors, and ``loss(model(input), target)`` is the loss. With
    ``loss=None`` the model computes its own loss (a Hugging Face model given ``labels``): each
    batch is then the model's whole input, typically a dict with the labels inside, and the
    loss is the output's ``loss`` (``output.loss``, ``output["loss"]``, or the output itself
    when it is a single number). An input that is a dict is passed as keyword arguments
    (``model(**inputs)``); anything else as one argument (``model(inputs)``); set
    ``model_inputs`` to change that. ``model`` and ``dataset`` are factories, called afresh in
    every trial process.

    Example:
        >>> import torch
        >>> from autotune import Workload
        >>> w = Workload(
        ...     model=lambda: torch.nn.Linear(4, 2),
        ...     dataset=lambda: torch.utils.data.TensorDataset(
        ...         torch.randn(64, 4), torch.randint(0, 2, (64,))),
        ...     loss=torch.nn.CrossEntropyLoss(),
        ...     optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        ... )
        >>> w.batch_size
        32
    """

    model: ModelFactory
    dataset: DatasetFactory
    #: ``(output, target) -> scalar tensor``; None when the model returns its own loss.
    loss: LossFn | None
    optimizer: OptimizerFactory
    name: str | None = None
    #: The batch size the user trains with today: the baseline's (any positive size).
    batch_size: int = 32
    #: Optional ``collate_fn`` for the DataLoader.
    collate_fn: Callable[[list[Any]], Any] | None = None
    #: Optional callable applied to each input batch on the device before the model
    #: (e.g. uint8 -> float normalisation done on the GPU).
    device_transform: Callable[[Any], Any] | None = None
    #: Free-form description shown by ``autotune workloads``.
    description: str = ""
    #: Extra keyword arguments for the DataLoader (e.g. ``shuffle``, ``drop_last``).
    dataloader_kwargs: dict[str, Any] = field(default_factory=dict)
    #: How each input batch is passed to the model (see :data:`ModelInputs`).
    model_inputs: ModelInputs = "auto"
    #: Clip the gradients' total norm to this before every optimizer step, as Hugging Face's
    #: ``max_grad_norm`` and Lightning's ``gradient_clip_val`` do; None does not clip.
    max_grad_norm: float | None = None
    #: Knob values of the run the user has today beside ``batch_size`` (e.g.
    #: ``{"pin_memory": True, "amp": "bf16"}``): the baseline's, which ``--baseline`` overrides.
    #: The framework adapters (:mod:`autotune.workload.frameworks`) read them off the user's
    #: ``TrainingArguments`` or DataLoader.
    baseline: dict[str, Any] = field(default_factory=dict)
    #: The framework's own per-step work (:class:`StepHooks`) for each trial's model and
    #: optimizer; None for a plain workload, whose step is autotune's alone.
    step_hooks: StepHooksFactory | None = None
