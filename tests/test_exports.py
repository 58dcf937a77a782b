"""The exported keyword arguments are the right names and work where they are passed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from autotune.recommend._export import exports
from autotune.space import KNOBS, Config, DeviceInfo

CPU = DeviceInfo(type="cpu", name="test cpu", memory_bytes=16 * 2**30, cpu_count=4)
CUDA = DeviceInfo(
    type="cuda",
    name="test gpu",
    memory_bytes=80 * 2**30,
    index=0,
    bf16_supported=True,
    compute_capability=(9, 0),
)


def dataset() -> TensorDataset:
    return TensorDataset(torch.arange(40, dtype=torch.float32).reshape(20, 2), torch.arange(20))


def test_the_sections_of_a_plain_configuration() -> None:
    assert set(exports(Config(), CPU)) == {
        "dataloader",
        "lightning_trainer",
        "hf_training_arguments",
        "accelerate",
        "set_by_hand",  # the batch: Lightning and Accelerate take it from the user's DataLoader
    }


def test_dataloader_kwargs_with_workers_iterate() -> None:
    config = Config(batch_size=8, num_workers=2, prefetch_factor=3, persistent_workers=True)
    kwargs = exports(config, CPU)["dataloader"]
    assert kwargs == {
        "batch_size": 8,
        "num_workers": 2,
        "pin_memory": False,
        "persistent_workers": True,
        "prefetch_factor": 3,
    }
    loader = DataLoader(dataset(), **kwargs)
    sizes = [len(inputs) for inputs, _ in loader]
    assert sizes == [8, 8, 4]  # drop_last is the user's choice: not exported


def test_dataloader_kwargs_without_workers_drop_worker_settings() -> None:
    # Settings that mean nothing without workers are left out: DataLoader refuses them.
    config = Config(batch_size=16, num_workers=0, prefetch_factor=4, persistent_workers=True)
    kwargs = exports(config, CPU)["dataloader"]
    assert kwargs == {"batch_size": 16, "num_workers": 0, "pin_memory": False}
    assert [len(inputs) for inputs, _ in DataLoader(dataset(), **kwargs)] == [16, 4]


def test_dataloader_default_prefetch_is_written_as_torchs_default() -> None:
    # An unset prefetch_factor with workers is PyTorch's 2; the export says so explicitly.
    kwargs = exports(Config(num_workers=2), CPU)["dataloader"]
    assert kwargs["prefetch_factor"] == 2
    assert kwargs["persistent_workers"] is False


@pytest.mark.parametrize(
    ("amp", "precision", "fp16", "bf16"),
    [
        ("off", "32-true", False, False),
        ("fp16", "16-mixed", True, False),
        ("bf16", "bf16-mixed", False, True),
    ],
)
def test_precision_for_each_amp(amp: str, precision: str, fp16: bool, bf16: bool) -> None:
    section = exports(Config(amp=amp), CUDA)
    assert section["lightning_trainer"]["precision"] == precision
    assert section["hf_training_arguments"]["fp16"] is fp16
    assert section["hf_training_arguments"]["bf16"] is bf16


def test_hf_training_arguments_on_cuda() -> None:
    config = Config(
        batch_size=64,
        num_workers=4,
        pin_memory=True,
        prefetch_factor=2,
        persistent_workers=True,
        amp="bf16",
        tf32=True,
        grad_accum_steps=4,
    )
    assert exports(config, CUDA)["hf_training_arguments"] == {
        "per_device_train_batch_size": 64,
        "gradient_accumulation_steps": 4,
        "dataloader_num_workers": 4,
        "dataloader_pin_memory": True,
        "dataloader_persistent_workers": True,
        "dataloader_prefetch_factor": 2,
        "fp16": False,
        "bf16": True,
        "tf32": True,
    }


@pytest.mark.parametrize(("tf32", "expected"), [(None, None), (True, True), (False, False)])
def test_unset_tf32_is_left_to_pytorch_in_the_exports(
    tf32: bool | None, expected: bool | None
) -> None:
    # A recommendation that never set TF32 must not turn it on or off in the user's trainer.
    hf = exports(Config(tf32=tf32), CUDA)["hf_training_arguments"]
    assert hf.get("tf32") is expected
    assert ("tf32" in hf) is (tf32 is not None)


def test_hf_training_arguments_on_cpu() -> None:
    hf = exports(Config(batch_size=32, tf32=True), CPU)["hf_training_arguments"]
    assert hf["use_cpu"] is True
    assert "tf32" not in hf  # TrainingArguments refuses tf32 without an Ampere GPU
    assert "dataloader_prefetch_factor" not in hf
    assert hf["dataloader_persistent_workers"] is False


def test_lightning_trainer_cpu_and_cuda() -> None:
    config = Config(cudnn_benchmark=True, grad_accum_steps=2)
    on_cuda = exports(config, CUDA)["lightning_trainer"]
    on_cpu = exports(config, CPU)["lightning_trainer"]
    assert on_cuda == {
        "accelerator": "gpu",
        "precision": "32-true",
        "accumulate_grad_batches": 2,
        "benchmark": True,
    }
    assert on_cpu == {"accelerator": "cpu", "precision": "32-true", "accumulate_grad_batches": 2}


def test_channels_last_and_device_prefetch_are_set_by_hand_in_every_framework() -> None:
    plain = exports(Config(), CUDA)
    tuned = exports(Config(channels_last=True, device_prefetch=True), CUDA)
    for section in ("dataloader", "lightning_trainer", "hf_training_arguments", "accelerate"):
        assert plain[section] == tuned[section]  # no framework has an argument for them
    for section in ("lightning_trainer", "hf_training_arguments", "accelerate"):
        hand = tuned["set_by_hand"][section]
        assert "channels_last" in hand["channels_last"]
        assert "device_prefetch" in hand
        assert "channels_last" not in plain["set_by_hand"].get(section, {})


def test_retaining_freed_memory_is_exported_as_the_environment_to_start_python_with() -> None:
    assert "environment" not in exports(Config(), CPU)
    environment = exports(Config(retain_freed_memory=True), CPU)["environment"]
    assert environment == {
        "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
        "MALLOC_TRIM_THRESHOLD_": str((1 << 31) - 1),
    }
    # What the variables do is tested in test_host_allocator.py.


@pytest.mark.slow
def test_the_steps_threads_are_exported_as_the_environment_torch_reads_at_start() -> None:
    both = exports(Config(retain_freed_memory=True, intra_op_threads=1), CPU)["environment"]
    assert set(both) == {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS"}
    environment = exports(Config(intra_op_threads=1), CPU)["environment"]
    assert environment == {"OMP_NUM_THREADS": "1"}
    started = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        env={**os.environ, **environment},
        capture_output=True,
        text=True,
        check=True,
    )
    assert started.stdout.strip() == "1"


def test_exports_are_json() -> None:
    section = exports(Config(num_workers=2, prefetch_factor=2, amp="fp16"), CUDA)
    assert json.loads(json.dumps(section)) == section


# -- the real classes accept the exports ---------------------------------------------------------

CPU_CONFIGS = {
    "defaults": Config(),
    "workers, bf16, accumulation": Config(
        batch_size=16,
        num_workers=2,
        prefetch_factor=4,
        persistent_workers=True,
        amp="bf16",
        grad_accum_steps=2,
    ),
    "compiled": Config(batch_size=8, compile="default"),
    "compiled max-autotune, threads": Config(compile="max-autotune", intra_op_threads=1),
}


@pytest.mark.parametrize("config", CPU_CONFIGS.values(), ids=CPU_CONFIGS.keys())
def test_training_arguments_accept_the_export(config: Config, tmp_path: Any) -> None:
    transformers = pytest.importorskip("transformers")
    kwargs = exports(config, CPU)["hf_training_arguments"]
    args = transformers.TrainingArguments(output_dir=str(tmp_path), **kwargs)
    assert args.per_device_train_batch_size == config.batch_size
    assert args.gradient_accumulation_steps == config.grad_accum_steps
    assert args.dataloader_num_workers == config.num_workers
    assert args.bf16 is (config.amp == "bf16")
    assert args.torch_compile is (config.compile != "off")
    if config.compile != "off":
        assert args.torch_compile_mode == config.compile
    if config.num_workers:
        assert args.dataloader_prefetch_factor == config.prefetch_factor
        assert args.dataloader_persistent_workers is config.persistent_workers
    assert args.use_cpu is True


@pytest.mark.parametrize("config", CPU_CONFIGS.values(), ids=CPU_CONFIGS.keys())
def test_lightning_trainer_accepts_the_export(config: Config, tmp_path: Any) -> None:
    lightning = pytest.importorskip("lightning")
    section = exports(config, CPU)
    trainer = lightning.Trainer(
        **section["lightning_trainer"],
        default_root_dir=str(tmp_path),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    assert trainer.accumulate_grad_batches == config.grad_accum_steps
    assert trainer.precision == section["lightning_trainer"]["precision"]
    # The DataModule's loader takes the dataloader export; the Trainer lists that by hand.
    assert set(section["set_by_hand"]["lightning_trainer"]) >= {"batch_size"}
    DataLoader(dataset(), **section["dataloader"])


@pytest.mark.parametrize("config", CPU_CONFIGS.values(), ids=CPU_CONFIGS.keys())
def test_accelerator_accepts_the_export(config: Config) -> None:
    pytest.importorskip("accelerate")
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    kwargs = exports(config, CPU)["accelerate"]
    AcceleratorState._reset_state(reset_partial_state=True)  # one Accelerator per process
    try:
        accelerator = Accelerator(**kwargs)
        assert accelerator.mixed_precision == ("no" if config.amp == "off" else config.amp)
        assert accelerator.gradient_accumulation_steps == config.grad_accum_steps
        assert accelerator.device.type == "cpu"
        backend = str(accelerator.state.dynamo_plugin.backend).lower()
        assert ("inductor" in backend) is (config.compile == "default")
        hand = exports(config, CPU)["set_by_hand"]["accelerate"]
        # A mode the backend string cannot carry is set by hand, never dropped.
        assert ("compile" in hand) is (config.compile == "max-autotune")
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)


def _non_default_values(device: DeviceInfo) -> list[tuple[str, Any]]:
    return [
        (name, value)
        for name, knob in KNOBS.items()
        for value in knob.values
        if value != knob.default and name not in ("batch_size", "grad_accum_steps")
    ]


@pytest.mark.parametrize("device", [CPU, CUDA], ids=["on-cpu", "on-gpu"])
def test_no_knob_is_silently_dropped_by_a_framework(device: DeviceInfo) -> None:
    """Every knob set away from its default changes a framework's arguments or is listed in
    that framework's set_by_hand."""
    base_config = Config(num_workers=2)  # workers, so that the loader's worker knobs apply
    base = exports(base_config, device)
    checked = 0
    for name, value in _non_default_values(device):
        if name == "num_workers":
            continue
        config = base_config.model_copy(update={name: value})
        if config.normalized() == base_config.normalized():
            continue  # e.g. prefetch_factor=2, what DataLoader does when it is unset
        section = exports(config, device)
        for framework in ("lightning_trainer", "hf_training_arguments", "accelerate"):
            hand = section["set_by_hand"].get(framework, {})
            changed = section[framework] != base[framework]
            assert changed or name in hand, f"{framework} drops {name}={value!r}"
            checked += 1
    assert checked > 30
