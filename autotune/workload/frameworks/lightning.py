"""``(LightningModule, LightningDataModule)`` as a workload, optionally with a ``Trainer``.

What ``trainer.fit`` does each step is what is measured: the module's own ``training_step``
(its returned loss) and the per-step hooks it overrides (:class:`ModuleHooks`), the first
optimizer its ``configure_optimizers`` returns, and the
DataModule's training DataLoader rebuilt with each trial's loader knobs, keeping its dataset,
collate function and sampler, as Lightning itself re-instantiates a DataLoader to inject a
sampler. The baseline is that DataLoader as the DataModule builds it and Lightning's default
precision (``32-true``), or the precision, clipping and accumulation of the ``Trainer`` given
third.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from autotune.errors import WorkloadError
from autotune.workload._contract import StepHooks, Workload
from autotune.workload.frameworks._shared import ModuleSource, loader_knobs, loader_kwargs

#: Lightning 2.x precision strings, as autotune's ``amp`` names them.
_AMP = {"32-true": "off", "32": "off", "16-mixed": "fp16", "bf16-mixed": "bf16"}


def _lightning() -> Any:
    return sys.modules.get("lightning.pytorch") or sys.modules.get("pytorch_lightning")


def is_lightning(returned: Any) -> bool:
    """Whether ``returned`` is ``(LightningModule, LightningDataModule[, Trainer])``."""
    pl = _lightning()
    if pl is None or not isinstance(returned, tuple) or len(returned) not in (2, 3):
        return False
    return isinstance(returned[0], pl.LightningModule) and isinstance(
        returned[1], pl.LightningDataModule
    )


def first_optimizer(configured: Any) -> torch.optim.Optimizer:
    """The first optimizer of what ``configure_optimizers`` may return: an optimizer, a list
    or tuple of them (or of lists, with schedulers), or a dict with ``"optimizer"``."""
    seen = configured
    while not isinstance(seen, torch.optim.Optimizer):
        if isinstance(seen, dict) and "optimizer" in seen:
            seen = seen["optimizer"]
        elif isinstance(seen, (list, tuple)) and seen:
            seen = seen[0]
        else:
            raise WorkloadError(
                f"configure_optimizers() returned {type(configured).__name__} with no optimizer "
                "in it; return an optimizer, a list of them or {'optimizer': ...}"
            )
    return seen


class ModuleHooks(StepHooks):
    """The LightningModule's per-step hooks that it overrides, called where ``Trainer.fit``
    calls them: ``on_train_batch_start``, ``on_before_backward``, ``on_after_backward``,
    ``on_before_optimizer_step``, ``on_before_zero_grad`` and ``on_train_batch_end`` (an
    exponential moving average of the weights, a gradient-norm log: work a step pays). Hooks
    left as Lightning defines them do nothing and are not called. The work of the Trainer's own
    loop (hook dispatch, the optimizer closure, its progress bar and logger) needs a running
    Trainer and is not measured."""

    NAMES = (
        "on_train_batch_start",
        "on_before_backward",
        "on_after_backward",
        "on_before_optimizer_step",
        "on_before_zero_grad",
        "on_train_batch_end",
    )

    def __init__(self, module: Any) -> None:
        base = _lightning().LightningModule
        self._name = type(module).__name__
        self._hooks = {
            name: getattr(module, name)
            for name in self.NAMES
            if getattr(type(module), name) is not getattr(base, name)
        }

    def _call(self, name: str, *args: Any) -> None:
        hook = self._hooks.get(name)
        if hook is None:
            return
        try:
            hook(*args)
        except Exception as exc:
            raise WorkloadError(
                f"{self._name}.{name}() failed outside a Trainer ({type(exc).__name__}: "
                f"{exc}); autotune steps the module without one, so make the hook work "
                "without self.trainer"
            ) from exc

    def before_step(self, batch: Any, batch_idx: int) -> None:
        self._call("on_train_batch_start", batch, batch_idx)

    def before_backward(self, loss: torch.Tensor) -> None:
        self._call("on_before_backward", loss)

    def after_backward(self) -> None:
        self._call("on_after_backward")

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self._call("on_before_optimizer_step", optimizer)

    def after_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self._call("on_before_zero_grad", optimizer)

    def after_step(self, loss: torch.Tensor, batch: Any, batch_idx: int) -> None:
        self._call("on_train_batch_end", {"loss": loss.detach()}, batch, batch_idx)


def _trainer_settings(trainer: Any) -> tuple[dict[str, Any], float | None]:
    """The baseline knobs and the clipping norm the Trainer sets."""
    precision = str(getattr(trainer, "precision", "32-true"))
    if precision not in _AMP:
        raise WorkloadError(
            f"Trainer(precision={precision!r}) has no autotune equivalent; use 32-true, "
            "16-mixed or bf16-mixed, or return (module, datamodule) without the Trainer"
        )
    clip = getattr(trainer, "gradient_clip_val", None)
    algorithm = str(getattr(trainer, "gradient_clip_algorithm", "norm") or "norm")
    if clip and "value" in algorithm:
        raise WorkloadError(
            "Trainer(gradient_clip_algorithm='value') clips each gradient, which autotune's "
            "step does not; use the default 'norm' or leave gradient_clip_val unset"
        )
    return {"amp": _AMP[precision]}, float(clip) if clip else None


def from_lightning(returned: tuple[Any, ...]) -> Workload:
    """The :class:`Workload` that ``Trainer.fit(module, datamodule)`` runs, a step at a time."""
    module, datamodule = returned[0], returned[1]
    name = type(module).__name__
    if not module.automatic_optimization:
        raise WorkloadError(
            f"{name} optimizes manually (automatic_optimization=False), which autotune cannot "
            "step; use automatic optimization or write an autotune.Workload"
        )
    datamodule.prepare_data()
    datamodule.setup("fit")
    loader = datamodule.train_dataloader()
    if not isinstance(loader, torch.utils.data.DataLoader):
        raise WorkloadError(
            f"{type(datamodule).__name__}.train_dataloader() returned "
            f"{type(loader).__name__}; return one torch DataLoader"
        )
    batch_size, baseline = loader_knobs(loader, f"{type(datamodule).__name__}.train_dataloader()")
    baseline["amp"] = "off"  # Lightning's default precision, 32-true
    max_grad_norm = None
    if len(returned) == 3:
        if returned[2].accumulate_grad_batches != 1:
            raise WorkloadError(
                "Trainer(accumulate_grad_batches=...) is held by autotune's --effective-batch; "
                "drop it from the Trainer and pass --effective-batch instead"
            )
        trainer_knobs, max_grad_norm = _trainer_settings(returned[2])
        baseline.update(trainer_knobs)

    def build_optimizer(owner: torch.nn.Module) -> torch.optim.Optimizer:
        try:
            return first_optimizer(owner.configure_optimizers())  # type: ignore[operator]
        except WorkloadError:
            raise
        except Exception as exc:
            raise WorkloadError(
                f"{name}.configure_optimizers() failed outside a Trainer: "
                f"{type(exc).__name__}: {exc}; build the optimizer without self.trainer"
            ) from exc

    source = ModuleSource(module, build_optimizer)
    dataset = loader.dataset
    return Workload(
        model=source.model,
        dataset=lambda: dataset,
        loss=None,  # training_step returns it
        optimizer=source.optimizer,
        batch_size=batch_size,
        collate_fn=loader.collate_fn,
        description=f"LightningModule {name} with {type(datamodule).__name__}",
        dataloader_kwargs=loader_kwargs(loader),
        model_inputs="training_step",
        max_grad_norm=max_grad_norm,
        baseline=baseline,
        step_hooks=lambda module, optimizer: ModuleHooks(module),
    )
