"""A recommendation file loads, validates, and trains a real model on the CPU."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.errors import ConfigError
from autotune.recommend._apply import load_recommendation
from autotune.recommend._export import exports
from autotune.recommend._schema import SCHEMA, validate_recommendation
from autotune.space import Config, DeviceInfo

CONFIG = Config(
    batch_size=8,
    num_workers=2,
    prefetch_factor=2,
    persistent_workers=False,
    amp="bf16",
    channels_last=True,
)
METRICS = {
    "samples_per_s": 812.5,
    "step_time_ms": 9.8,
    "peak_memory_bytes": None,
    "peak_host_memory_bytes": 1_200_000_000,
    "data_wait_fraction": 0.04,
}


@pytest.fixture
def document() -> dict[str, Any]:
    """A valid recommendation for the CPU, written out by hand."""
    return {
        "schema": "autotune.recommendation/v1",
        "workload": "builtin:image-cnn",
        "device": {"type": "cpu", "name": "test cpu", "memory_bytes": 16 * 2**30},
        "config": CONFIG.public_dict(),
        "metrics": dict(METRICS),
        "baseline": {
            "config": Config(batch_size=32).public_dict(),
            "metrics": {**METRICS, "samples_per_s": 300.0, "data_wait_fraction": 0.7},
        },
        "speedup": 2.71,
        "trials": {"total": 12, "ok": 10, "failed": 2},
        "diagnosis": "Verdict: compute-bound.",
        "exports": {
            "dataloader": {
                "batch_size": 8,
                "num_workers": 2,
                "pin_memory": False,
                "persistent_workers": False,
                "prefetch_factor": 2,
            },
            "lightning_trainer": {
                "accelerator": "cpu",
                "precision": "bf16-mixed",
                "accumulate_grad_batches": 1,
            },
            "hf_training_arguments": {
                "per_device_train_batch_size": 8,
                "bf16": True,
                "use_cpu": True,
            },
        },
        "a_later_field": "extra keys are allowed",
    }


@pytest.fixture
def path(tmp_path: Path, document: dict[str, Any]) -> Path:
    file = tmp_path / "best.json"
    file.write_text(json.dumps(document, indent=2))
    return file


def images() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(20, 3, 8, 8, generator=generator)
    return TensorDataset(inputs, torch.randint(0, 4, (20,), generator=generator))


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )


def test_load_and_train_one_epoch(path: Path) -> None:
    rec = load_recommendation(path)
    assert rec.config == CONFIG
    assert rec.device == torch.device("cpu")
    assert rec.document["workload"] == "builtin:image-cnn"

    loader = rec.dataloader(images(), shuffle=True)
    assert (loader.batch_size, loader.num_workers, loader.prefetch_factor) == (8, 2, 2)
    model = rec.prepare_model(small_cnn())
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]

    seen = 0
    for inputs, target in rec.batches(loader):
        assert inputs.is_contiguous(memory_format=torch.channels_last)
        with rec.autocast():
            output = model(inputs)
            assert output.dtype == torch.bfloat16
            loss = nn.functional.cross_entropy(output, target)
        assert rec.backward(loss, optimizer) is True
        seen += len(inputs)
    assert seen == 20  # one whole epoch, the last short batch included
    assert all(p.grad is None for p in model.parameters())  # zero_grad(set_to_none=True)
    assert any(
        not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters(), strict=True)
    )
    assert rec.grad_scaler() is None  # bf16 needs no scaler


def test_load_from_dict_copies_it(document: dict[str, Any]) -> None:
    rec = load_recommendation(document)
    document["workload"] = "changed"
    assert rec.document["workload"] == "builtin:image-cnn"
    with pytest.raises(AttributeError):
        rec.config = Config()  # type: ignore[misc]


def test_user_kwargs_override(document: dict[str, Any]) -> None:
    rec = load_recommendation(document)
    loader = rec.dataloader(images(), batch_size=16, num_workers=0, drop_last=True)
    assert (loader.batch_size, loader.num_workers, loader.drop_last) == (16, 0, True)
    assert len(list(loader)) == 1


def test_amp_off_and_gradient_accumulation(document: dict[str, Any]) -> None:
    document["config"] = Config(batch_size=8, grad_accum_steps=2).public_dict()
    rec = load_recommendation(document)
    model = rec.prepare_model(small_cnn())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    stepped = []
    for inputs, target in rec.batches(rec.dataloader(images())):
        assert inputs.is_contiguous()  # no channels_last without the knob
        with rec.autocast():
            output = model(inputs)
        assert output.dtype == torch.float32
        stepped.append(rec.backward(nn.functional.cross_entropy(output, target), optimizer))
    assert stepped == [False, True, False]


def test_fp16_uses_one_grad_scaler(document: dict[str, Any]) -> None:
    document["config"] = Config(amp="fp16").public_dict()
    rec = load_recommendation(document)
    scaler = rec.grad_scaler()
    assert isinstance(scaler, torch.amp.GradScaler)
    assert rec.grad_scaler() is scaler


def test_cuda_recommendation_needs_cuda_or_an_override(document: dict[str, Any]) -> None:
    document["device"]["type"] = "cuda"
    document["config"] = Config(
        batch_size=8, pin_memory=True, device_prefetch=True, cudnn_benchmark=True
    ).public_dict()
    if torch.cuda.is_available():
        assert load_recommendation(document).device.type == "cuda"
    else:
        with pytest.raises(ConfigError, match=r'made for CUDA.*device="cpu"'):
            load_recommendation(document)
    rec = load_recommendation(document, device="cpu")
    assert rec.device == torch.device("cpu")
    loader = rec.dataloader(images())
    assert loader.pin_memory is False  # pinning only helps copies to a GPU
    batches = list(rec.batches(loader))
    assert sum(len(inputs) for inputs, _ in batches) == 20


@pytest.mark.parametrize("device", ["tpu:0", "not a device"])
def test_bad_device_override(document: dict[str, Any], device: str) -> None:
    with pytest.raises(ConfigError, match="device="):
        load_recommendation(document, device=device)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_recommendation(tmp_path / "nope.json")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="could not be read"):
        load_recommendation(tmp_path)


def test_invalid_json(tmp_path: Path) -> None:
    file = tmp_path / "broken.json"
    file.write_text('{"schema": "autotune.recommendation/v1",')
    with pytest.raises(ConfigError, match="not valid JSON .*line 1"):
        load_recommendation(file)


def test_wrong_schema(path: Path, document: dict[str, Any]) -> None:
    document["schema"] = "autotune.recommendation/v0"
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError, match="schema is 'autotune.recommendation/v0'"):
        load_recommendation(path)


def test_not_an_object(tmp_path: Path) -> None:
    file = tmp_path / "list.json"
    file.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must be a JSON object, not list"):
        load_recommendation(file)


@pytest.mark.parametrize(
    "key",
    [
        "schema",
        "workload",
        "device.memory_bytes",
        "metrics.data_wait_fraction",
        "baseline.metrics",
        "speedup",
        "trials.failed",
        "diagnosis",
        "exports.hf_training_arguments",
    ],
)
def test_missing_key(document: dict[str, Any], key: str) -> None:
    *parents, last = key.split(".")
    section = document
    for part in parents:
        section = section[part]
    del section[last]
    with pytest.raises(ConfigError, match=f"lacks the required key '{key}'"):
        load_recommendation(document)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("workload", 3, "must be a string, not int"),
        ("device.memory_bytes", 1.5, "must be an integer, not float"),
        ("metrics.samples_per_s", None, "must be a number, not NoneType"),
        ("metrics.samples_per_s", True, "must be a number, not bool"),
        ("trials", [], "must be an object, not list"),
        ("speedup", "2x", "must be a number or null"),
    ],
)
def test_wrong_type(document: dict[str, Any], key: str, value: Any, expected: str) -> None:
    *parents, last = key.split(".")
    section = document
    for part in parents:
        section = section[part]
    section[last] = value
    with pytest.raises(ConfigError, match=expected):
        validate_recommendation(document)


def test_null_metrics_allowed_where_they_can_be_absent(document: dict[str, Any]) -> None:
    failed_baseline = copy.deepcopy(document)
    failed_baseline["speedup"] = None
    failed_baseline["baseline"]["metrics"] = dict.fromkeys(METRICS)
    validate_recommendation(failed_baseline)


def test_config_missing_a_knob(document: dict[str, Any]) -> None:
    del document["config"]["channels_last"]
    with pytest.raises(ConfigError, match="'config' lacks the knob.*channels_last"):
        load_recommendation(document)


def test_config_invalid_knob_value(document: dict[str, Any]) -> None:
    document["baseline"]["config"]["batch_size"] = 0
    with pytest.raises(ConfigError, match=r"baseline\.config\.batch_size is invalid"):
        load_recommendation(document)


def test_config_extra_keys_ignored(document: dict[str, Any]) -> None:
    document["config"]["a_future_knob"] = 1
    assert load_recommendation(document).config == CONFIG


def test_document_with_generated_exports_is_valid(document: dict[str, Any]) -> None:
    device = DeviceInfo(type="cpu", name="test cpu", memory_bytes=16 * 2**30)
    document["exports"] = exports(CONFIG, device)
    assert document["schema"] == SCHEMA
    validate_recommendation(document)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("device_prefetch", [False, True])
def test_train_one_epoch_on_cuda(document: dict[str, Any], device_prefetch: bool) -> None:
    document["device"]["type"] = "cuda"
    document["config"] = CONFIG.model_copy(
        update={
            "pin_memory": True,
            "device_prefetch": device_prefetch,
            "cudnn_benchmark": True,
            "amp": "fp16",
        }
    ).public_dict()
    rec = load_recommendation(document)
    model = rec.prepare_model(small_cnn())
    assert torch.backends.cudnn.benchmark is True
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = 0
    for inputs, target in rec.batches(rec.dataloader(images(), shuffle=True)):
        assert inputs.is_cuda and inputs.is_contiguous(memory_format=torch.channels_last)
        with rec.autocast():
            output = model(inputs)
            assert output.dtype == torch.float16
            loss = nn.functional.cross_entropy(output, target)
        assert rec.backward(loss, optimizer) is True
        seen += len(inputs)
    assert seen == 20
    assert isinstance(rec.grad_scaler(), torch.amp.GradScaler)
