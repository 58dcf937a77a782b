"""A Hugging Face ``transformers.Trainer`` as a workload.

What the Trainer's own training step does is what is measured: the model called with the
collated dict as keyword arguments and its own loss, the optimizer ``TrainingArguments.optim``
chooses with its learning rate, weight decay and parameter groups (``Trainer.create_optimizer``),
the gradients clipped to ``max_grad_norm``, the collator that drops the columns the model does
not take (``remove_unused_columns``) and the Trainer's sampler; around it, the work its
training loop does each step (:class:`TrainerHooks`). The baseline is the
``TrainingArguments`` exactly as the script set them: their batch size, DataLoader settings
(``dataloader_pin_memory=True`` by default), precision and ``torch_compile``.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils.data import RandomSampler

from autotune.errors import WorkloadError
from autotune.workload._contract import StepHooks, Workload
from autotune.workload.frameworks._shared import ModuleSource


def _collator(trainer: Any) -> tuple[Any, Any]:
    """The training dataset and the collator as the Trainer's own DataLoader gets them."""
    dataset, collator = trainer.train_dataset, trainer.data_collator
    remove = getattr(trainer, "_remove_unused_columns", None)
    wrap = getattr(trainer, "_get_collator_with_removed_columns", None)
    try:
        import datasets

        is_arrow = isinstance(dataset, datasets.Dataset)
    except ImportError:
        is_arrow = False
    if is_arrow and remove is not None:
        dataset = remove(dataset, description="training")
    elif wrap is not None:
        collator = wrap(collator, description="training")
    return dataset, collator


def _sampler_kwargs(trainer: Any, dataset: Any) -> dict[str, Any]:
    sampler_of = getattr(trainer, "_get_train_sampler", None)
    if sampler_of is None or isinstance(dataset, torch.utils.data.IterableDataset):
        return {}
    try:
        sampler = sampler_of(dataset)
    except TypeError:  # transformers before 4.52: no argument
        sampler = sampler_of()
    if sampler is None or isinstance(sampler, RandomSampler):
        return {"shuffle": sampler is not None}
    return {"shuffle": False, "sampler": sampler}


#: The training length the learning-rate schedule is built for: long, so that the rate a trial
#: steps with stays near the script's (the length of a trial does not change a step's work).
SCHEDULE_STEPS = 1_000_000


class TrainerHooks(StepHooks):
    """What ``Trainer.train()``'s loop does each step around its training step, with the
    Trainer's own objects: its callbacks' step events (the progress bar's among them; the
    reporting integrations', which would open runs in the user's trackers, left out), the loss
    check of ``logging_nan_inf_filter`` (a device synchronisation each step), the running loss
    and floating-point count, the gradient norm it computes even when it does not clip, the
    learning-rate scheduler's step, and the running loss read back when a log is due.
    Checkpoints and evaluations are not made."""

    def __init__(self, trainer: Any, module: torch.nn.Module, optimizer: Any) -> None:
        from transformers import TrainerControl, TrainerState

        try:
            from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK
        except ImportError:  # older transformers: no reporting integrations to leave out
            INTEGRATION_TO_CALLBACK = {}  # noqa: N806

        self._trainer, self._args, self._module = trainer, trainer.args, module
        trainer.lr_scheduler = None  # create_scheduler builds one only when none is set
        self._scheduler = trainer.create_scheduler(SCHEDULE_STEPS, optimizer)
        trainer.lr_scheduler = None
        # One rank of several (a DDP trial): the progress bar and logs are rank 0's, as in train().
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        first = not distributed or torch.distributed.get_rank() == 0
        self._state = TrainerState(
            max_steps=SCHEDULE_STEPS, is_local_process_zero=first, is_world_process_zero=first
        )
        self._state.compute_steps(self._args, SCHEDULE_STEPS)
        reporting = tuple(INTEGRATION_TO_CALLBACK.values())
        self._callbacks = copy.copy(trainer.callback_handler)
        self._callbacks.callbacks = [
            cb for cb in self._callbacks.callbacks if not isinstance(cb, reporting)
        ]
        self._callbacks.model, self._callbacks.optimizer = module, optimizer
        self._callbacks.lr_scheduler = self._scheduler
        self._control = TrainerControl()
        self._event("on_train_begin")
        self._running_loss: torch.Tensor | None = None
        self._flos = 0.0
        #: Whether an accumulation cycle has begun and not yet reached its optimizer step.
        self._in_cycle = False

    def _event(self, name: str, *logs: dict[str, float]) -> None:
        """Send the Trainer's callbacks one event, as its loop does."""
        try:
            send = getattr(self._callbacks, name)
            self._control = send(self._args, self._state, self._control, *logs)
        except Exception as exc:
            raise WorkloadError(
                f"a callback of the Trainer failed in {name} ({type(exc).__name__}: {exc}); "
                "autotune sends the callbacks their step events around its own step, outside "
                "train(), so make them work without train()'s set-up"
            ) from exc

    def before_step(self, batch: Any, batch_idx: int) -> None:
        if not self._in_cycle:  # once per optimizer step, at its first micro-batch
            self._event("on_step_begin")
            self._in_cycle = True

    def before_optimizer_step(self, optimizer: Any) -> None:
        if not self._args.max_grad_norm or self._args.max_grad_norm <= 0:
            # The Trainer reports the gradients' norm every step, clipping or not.
            torch.nn.utils.clip_grad_norm_(self._module.parameters(), float("inf"))
        self._event("on_pre_optimizer_step")

    def after_optimizer_step(self, optimizer: Any) -> None:
        self._event("on_optimizer_step")
        self._in_cycle = False
        # A plateau schedule steps on an evaluation's metric, not every step (as in train()).
        if not isinstance(self._scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            self._scheduler.step()
        self._state.global_step += 1
        self._event("on_step_end")
        if self._control.should_log and self._running_loss is not None:
            logs = {
                "loss": float(self._running_loss),
                "learning_rate": optimizer.param_groups[0]["lr"],
            }
            self._running_loss = None
            self._control.should_log = False
            self._event("on_log", logs)
        self._control.should_save = self._control.should_evaluate = False

    def after_step(self, loss: torch.Tensor, batch: Any, batch_idx: int) -> None:
        detached = loss.detach()
        if not (
            self._args.logging_nan_inf_filter
            and bool(torch.isnan(detached) or torch.isinf(detached))
        ):
            self._running_loss = (
                detached if self._running_loss is None else self._running_loss + detached
            )
        if isinstance(batch, dict):
            self._flos += float(self._trainer.floating_point_ops(batch))
        if self._in_cycle:  # a micro-batch that accumulated without stepping
            self._event("on_substep_end")


def baseline_knobs(args: Any) -> dict[str, Any]:
    """The knob values ``TrainingArguments`` set, as autotune names them."""
    knobs: dict[str, Any] = {
        "num_workers": args.dataloader_num_workers,
        "pin_memory": bool(args.dataloader_pin_memory),
        "amp": "bf16" if args.bf16 else "fp16" if args.fp16 else "off",
    }
    if args.dataloader_num_workers > 0:
        knobs["persistent_workers"] = bool(args.dataloader_persistent_workers)
        knobs["prefetch_factor"] = args.dataloader_prefetch_factor
    if getattr(args, "torch_compile", False):
        mode = getattr(args, "torch_compile_mode", None)
        knobs["compile"] = mode or "default"
    if getattr(args, "tf32", None) is not None:
        knobs["tf32"] = bool(args.tf32)
    return knobs


def from_trainer(trainer: Any) -> Workload:
    """The :class:`Workload` that ``trainer.train()`` runs, one step of it at a time."""
    args = trainer.args
    if trainer.train_dataset is None:
        raise WorkloadError(
            "the Trainer has no train_dataset; pass Trainer(train_dataset=...) in the function"
        )
    if getattr(trainer, "optimizer", None) is not None:
        raise WorkloadError(
            "the Trainer was given an optimizer instance (optimizers=(...)), which autotune "
            "cannot rebuild per trial; choose it with TrainingArguments(optim=...) instead"
        )
    if args.gradient_accumulation_steps != 1:
        effective = args.per_device_train_batch_size * args.gradient_accumulation_steps
        raise WorkloadError(
            f"TrainingArguments(gradient_accumulation_steps={args.gradient_accumulation_steps}) "
            "is held by autotune's --effective-batch; leave it at 1 in the function and pass "
            f"--effective-batch {effective}"
        )
    dataset, collator = _collator(trainer)

    def build_optimizer(module: torch.nn.Module) -> torch.optim.Optimizer:
        trainer.optimizer = None  # create_optimizer builds one only when none is set
        try:
            try:
                return trainer.create_optimizer(module)
            except TypeError:  # transformers before 4.56 builds it for trainer.model only
                trainer.model = module
                return trainer.create_optimizer()
        finally:
            trainer.optimizer = None

    source = ModuleSource(trainer.model, build_optimizer)
    max_grad_norm = args.max_grad_norm
    return Workload(
        model=source.model,
        dataset=lambda: dataset,
        loss=None,  # the model's own loss, from the labels in the batch
        optimizer=source.optimizer,
        batch_size=args.per_device_train_batch_size,
        collate_fn=collator,
        description=f"transformers Trainer over {type(trainer.model).__name__}",
        dataloader_kwargs=_sampler_kwargs(trainer, dataset),
        model_inputs="kwargs",
        max_grad_norm=max_grad_norm if max_grad_norm and max_grad_norm > 0 else None,
        baseline=baseline_knobs(args),
        step_hooks=lambda module, optimizer: TrainerHooks(trainer, module, optimizer),
    )
