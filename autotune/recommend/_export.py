"""The recommended configuration as keyword arguments for the places users set these knobs.

Each framework has one table here: the knobs its arguments express, and for the others what to
set by hand (``set_by_hand``), so that no knob of a recommendation is silently dropped.
``channels_last`` and ``device_prefetch`` have no keyword in any of them: plain PyTorch scripts
get them from :class:`~autotune.recommend.Recommendation` (``prepare_model`` and ``batches``).
A model that takes a dict batch is called with it as keyword arguments, as Hugging Face's
``Trainer`` does (:meth:`~autotune.recommend.Recommendation.call_model`).
"""

from __future__ import annotations

from typing import Any

from autotune.measure import RETAIN_ENVIRONMENT, expandable_segments_environment
from autotune.space import KNOBS, Config, DeviceInfo

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
        if not config.in_order:  # torch 2.6 and later; left out at PyTorch's default
            kwargs["in_order"] = False
    return kwargs


def optimizer_kwargs(config: Config) -> dict[str, Any] | None:
    """Keyword arguments to add to the optimizer's constructor (``fused=True`` or
    ``foreach=True``); None when its implementation is left as the workload built it.

    Example:
        >>> optimizer_kwargs(Config(optimizer_impl="fused"))
        {'fused': True}
    """
    if config.optimizer_impl == "default":
        return None
    return {config.optimizer_impl: True}


#: Hugging Face ``TrainingArguments.optim`` names for an optimizer class and implementation.
_HF_OPTIM = {("AdamW", "fused"): "adamw_torch_fused"}


def hf_optim(config: Config, optimizer: str) -> str | None:
    """``TrainingArguments.optim`` for the workload's ``optimizer`` class (the Trainer's own is
    AdamW) with the recommended implementation; None where the Trainer has no such name."""
    if config.optimizer_impl == "default":
        return None
    return _HF_OPTIM.get((optimizer or "AdamW", config.optimizer_impl))


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


#: Knobs a Hugging Face ``TrainingArguments`` expresses (on CUDA, ``tf32`` too).
_HF_EXPRESSES = frozenset(
    {
        "batch_size",
        "grad_accum_steps",
        "num_workers",
        "pin_memory",
        "prefetch_factor",
        "persistent_workers",
        "amp",
        "compile",
    }
)
#: Knobs Lightning's ``Trainer`` expresses (on CUDA, ``cudnn_benchmark`` too).
_LIGHTNING_EXPRESSES = frozenset({"amp", "grad_accum_steps"})
#: Knobs an Accelerate ``Accelerator`` expresses (``compile`` only in inductor's default mode).
_ACCELERATE_EXPRESSES = frozenset({"amp", "grad_accum_steps"})

_LOADER_KNOBS = (
    "batch_size",
    "num_workers",
    "pin_memory",
    "prefetch_factor",
    "persistent_workers",
    "in_order",
)
_BY_HAND = {
    **{name: 'build the DataLoader with exports["dataloader"]' for name in _LOADER_KNOBS},
    "compile": 'torch.compile(model, **exports["torch_compile"])',
    "channels_last": "model.to(memory_format=torch.channels_last) before training",
    "device_prefetch": "copy the next batch to the GPU on a side stream (rec.batches does)",
    "cudnn_benchmark": "torch.backends.cudnn.benchmark = True before training",
    "tf32": 'torch.backends.cuda.matmul.fp32_precision = "tf32" (and cudnn.conv)',
    "retain_freed_memory": 'start Python with exports["environment"]',
    "intra_op_threads": 'start Python with exports["environment"] (OMP_NUM_THREADS)',
    "expandable_segments": 'start Python with exports["environment"] (PYTORCH_CUDA_ALLOC_CONF)',
    "optimizer_impl": 'build the optimizer with exports["optimizer"] added to its arguments',
}
#: Where a framework has its own place for a knob it has no argument for.
_BY_HAND_IN = {
    "lightning_trainer": {
        **{
            name: 'return DataLoader(..., **exports["dataloader"]) from the DataModule\'s '
            "train_dataloader()"
            for name in _LOADER_KNOBS
        },
        "compile": 'torch.compile(the LightningModule, **exports["torch_compile"])',
        "optimizer_impl": 'add exports["optimizer"] to the optimizer configure_optimizers() builds',
    },
    "hf_training_arguments": {
        "optimizer_impl": "Trainer(optimizer_cls_and_kwargs=(your optimizer class, its arguments "
        'with exports["optimizer"] added)): TrainingArguments.optim names no such optimizer',
    },
    "accelerate": {
        "compile": 'Accelerator(dynamo_plugin=TorchDynamoPlugin(backend="inductor", '
        'mode=exports["torch_compile"]["mode"])) instead of dynamo_backend',
    },
}


def accelerate_kwargs(config: Config, device: DeviceInfo) -> dict[str, Any]:
    """Keyword arguments for Accelerate's ``Accelerator`` (1.0 and later).

    ``dynamo_backend="inductor"`` compiles in inductor's default mode; another mode needs a
    ``TorchDynamoPlugin``, which is no JSON value, so it is listed in ``set_by_hand``.
    """
    kwargs: dict[str, Any] = {
        "mixed_precision": "no" if config.amp == "off" else config.amp,
        "gradient_accumulation_steps": config.grad_accum_steps,
    }
    if not device.is_cuda:
        kwargs["cpu"] = True
    if config.compile == "default":
        kwargs["dynamo_backend"] = "inductor"
    return kwargs


def _expressed(section: str, config: Config, device: DeviceInfo) -> frozenset[str]:
    if section == "hf_training_arguments":
        return _HF_EXPRESSES | ({"tf32"} if device.is_cuda else set())
    if section == "lightning_trainer":
        return _LIGHTNING_EXPRESSES | ({"cudnn_benchmark"} if device.is_cuda else set())
    return _ACCELERATE_EXPRESSES | ({"compile"} if config.compile == "default" else set())


def set_by_hand(
    config: Config, device: DeviceInfo, optimizer: str = ""
) -> dict[str, dict[str, str]]:
    """Per framework section, the recommended knobs its arguments cannot express and how to
    set each: every knob whose value is not PyTorch's default and is not in the section.

    Example:
        >>> cpu = DeviceInfo(type="cpu", name="cpu", memory_bytes=1)
        >>> set_by_hand(Config(num_workers=2), cpu)["accelerate"]["num_workers"]
        'build the DataLoader with exports["dataloader"]'
        >>> "hf_training_arguments" in set_by_hand(Config(num_workers=2), cpu)
        False
    """
    config = config.normalized()
    values = config.model_dump()
    changed = {
        name: values[name]
        for name in values
        if name in KNOBS and values[name] != KNOBS[name].default and name != "batch_size"
    }
    # The batch is always a choice, whatever its value: a framework without it says where.
    changed["batch_size"] = config.batch_size
    if config.num_workers == 0:
        changed.pop("prefetch_factor", None)
        changed.pop("persistent_workers", None)
    sections: dict[str, dict[str, str]] = {}
    for section in ("hf_training_arguments", "lightning_trainer", "accelerate"):
        expressed = _expressed(section, config, device)
        if section == "hf_training_arguments" and hf_optim(config, optimizer) is not None:
            expressed |= {"optimizer_impl"}
        hand = {
            name: _BY_HAND_IN.get(section, {}).get(name)
            or _BY_HAND.get(name)
            or f"set {name}={value!r} by hand (docs/user/knobs.md)"
            for name, value in sorted(changed.items())
            if name not in expressed
        }
        if hand:
            sections[section] = hand
    return sections


def exports(config: Config, device: DeviceInfo, optimizer: str = "") -> dict[str, dict[str, Any]]:
    """The recommendation's ``exports`` section: ``dataloader``, ``lightning_trainer``,
    ``hf_training_arguments`` and ``accelerate`` keyword arguments for ``config`` on
    ``device``; ``set_by_hand``, per framework, the knobs its arguments cannot express;
    ``torch_compile``'s when the model is to be compiled (Lightning has no ``Trainer``
    argument for it: compile the LightningModule with them), and ``environment`` when glibc is
    to retain freed memory or the step's threads are set: variables to set before Python
    starts, for a script that does not call ``rec.prepare_model`` (which sets the same
    thresholds, and ``torch.set_num_threads``, in the running process), or CUDA's allocator is
    to map expandable segments; ``optimizer``, the arguments to add to the optimizer's
    constructor when its implementation is chosen (``optimizer``: the workload's optimizer
    class, which picks Hugging Face's ``optim`` name)."""
    sections = {
        "dataloader": dataloader_kwargs(config),
        "lightning_trainer": lightning_trainer_kwargs(config, device),
        "hf_training_arguments": hf_training_arguments(config, device),
        "accelerate": accelerate_kwargs(config, device),
    }
    optim = hf_optim(config, optimizer)
    if optim is not None:
        sections["hf_training_arguments"]["optim"] = optim
    optimizer_arguments = optimizer_kwargs(config)
    if optimizer_arguments is not None:
        sections["optimizer"] = optimizer_arguments
    hand = set_by_hand(config, device, optimizer)
    if hand:
        sections["set_by_hand"] = hand
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
    if config.expandable_segments and device.is_cuda:
        environment.update(expandable_segments_environment({}))
    if environment:
        sections["environment"] = environment
    return sections


def launch_exports(ranks: int) -> dict[str, Any]:
    """``exports.launch``: how to start ``ranks`` DDP ranks on one host with torchrun,
    Lightning's ``Trainer`` and ``accelerate launch``; batch size and workers are per rank.

    Example:
        >>> launch_exports(2)["torchrun"]
        'torchrun --standalone --nproc-per-node 2 YOUR_SCRIPT.py'
    """
    return {
        "torchrun": f"torchrun --standalone --nproc-per-node {ranks} YOUR_SCRIPT.py",
        "lightning_trainer": {"devices": ranks, "strategy": "ddp"},
        "accelerate": {"num_processes": ranks},
    }
