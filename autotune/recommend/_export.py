"""The recommended configuration as keyword arguments for the places users set these knobs.

``channels_last`` and ``device_prefetch`` have no keyword in any of them: they are applied by
:class:`~autotune.recommend.Recommendation` (``prepare_model`` and ``batches``). A model that
takes a dict batch is called with it as keyword arguments, as Hugging Face's ``Trainer`` does
(:meth:`~autotune.recommend.Recommendation.call_model`).
"""

from __future__ import annotations

from typing import Any

from autotune.measure import RETAIN_ENVIRONMENT
from autotune.space import Config, DeviceInfo

# Lightning 2.x names (``lightning.pytorch.Trainer``): the precision strings replaced 1.x's
# ``precision=16`` / ``"bf16"`` in 2.0.
_LIGHTNING_PRECISION = {"off": "32-true", "fp16": "16-mixed", "bf16": "bf16-mixed"}


def dataloader_kwargs(config: Config) -> dict[str, Any]:
    """Keyword arguments for ``torch.utils.data.DataLoader``, usable as ``DataLoader(ds, **kw)``.

    ``prefetch_factor`` and ``persistent_workers`` appear only with workers, because
    ``DataLoader`` refuses them without; ``drop_last`` is left to the user.

    Example:
        >>> dataloader_kwargs(Config(batch_size=64, num_workers=2, prefetch_factor=4))
        {'batch_size': 64, 'num_workers': 2, 'pin_memory': False, 'persistent_workers': False, \
'prefetch_factor': 4}
    """
    config = config.normalized()
    kwargs: dict[str, Any] = {
        "batch_size": config.batch_size,
        "num_workers": config.num_workers,
        "pin_memory": config.pin_memory,
    }
    if config.num_workers > 0:
        kwargs["persistent_workers"] = config.persistent_workers
        if config.prefetch_factor is not None:
            kwargs["prefetch_factor"] = config.prefetch_factor
    return kwargs


def lightning_trainer_kwargs(config: Config, device: DeviceInfo) -> dict[str, Any]:
    """Keyword arguments for Lightning 2.x's ``Trainer``."""
    kwargs: dict[str, Any] = {
        "accelerator": "gpu" if device.is_cuda else "cpu",
        "precision": _LIGHTNING_PRECISION[config.amp],
        "accumulate_grad_batches": config.grad_accum_steps,
    }
    if device.is_cuda:
        kwargs["benchmark"] = config.cudnn_benchmark
    return kwargs


def hf_training_arguments(config: Config, device: DeviceInfo) -> dict[str, Any]:
    """Keyword arguments for Hugging Face ``transformers.TrainingArguments`` (4.34 and later).

    ``use_cpu`` replaced ``no_cuda`` in 4.34; ``tf32`` is given only on CUDA, where
    ``TrainingArguments`` accepts it, and only when the recommendation sets it.
    """
    config = config.normalized()
    kwargs: dict[str, Any] = {
        "per_device_train_batch_size": config.batch_size,
        "gradient_accumulation_steps": config.grad_accum_steps,
        "dataloader_num_workers": config.num_workers,
        "dataloader_pin_memory": config.pin_memory,
        "dataloader_persistent_workers": config.persistent_workers,
        "fp16": config.amp == "fp16",
        "bf16": config.amp == "bf16",
    }
    if config.num_workers > 0 and config.prefetch_factor is not None:
        kwargs["dataloader_prefetch_factor"] = config.prefetch_factor
    if device.is_cuda:
        if config.tf32 is not None:  # unset: leave PyTorch's defaults, as the baseline did
            kwargs["tf32"] = config.tf32
    else:
        kwargs["use_cpu"] = True
    if config.compile != "off":
        kwargs["torch_compile"] = True
        kwargs["torch_compile_mode"] = config.compile
    return kwargs


def torch_compile_kwargs(config: Config) -> dict[str, Any] | None:
    """Keyword arguments for ``torch.compile(model, **kw)``; None when it is not recommended."""
    if config.compile == "off":
        return None
    return {"mode": None if config.compile == "default" else config.compile}


def exports(config: Config, device: DeviceInfo) -> dict[str, dict[str, Any]]:
    """The recommendation's ``exports`` section: ``dataloader``, ``lightning_trainer`` and
    ``hf_training_arguments`` keyword arguments for ``config`` on ``device``,
    ``torch_compile``'s when the model is to be compiled (Lightning has no ``Trainer``
    argument for it: compile the LightningModule with them), and ``environment`` when glibc is
    to retain freed memory or the step's threads are set: variables to set before Python
    starts, for a script that does not call ``rec.prepare_model`` (which sets the same
    thresholds, and ``torch.set_num_threads``, in the running process)."""
    sections = {
        "dataloader": dataloader_kwargs(config),
        "lightning_trainer": lightning_trainer_kwargs(config, device),
        "hf_training_arguments": hf_training_arguments(config, device),
    }
    compile_kwargs = torch_compile_kwargs(config)
    if compile_kwargs is not None:
        sections["torch_compile"] = compile_kwargs
    environment: dict[str, str] = {}
    if config.retain_freed_memory:
        environment.update(RETAIN_ENVIRONMENT)
    if config.intra_op_threads is not None:
        # PyTorch sizes its intra-op pool from this at start (DataLoader workers set their own
        # to 1 whatever it says).
        environment["OMP_NUM_THREADS"] = str(config.intra_op_threads)
    if environment:
        sections["environment"] = environment
    return sections
