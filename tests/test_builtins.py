"""The built-in workloads build, pickle, train and are deterministic."""

from __future__ import annotations

import math
import pickle

import pytest
import torch
from torch.utils.data import DataLoader

from autotune.workload._contract import Workload
from autotune.workload.builtins import BUILTINS

EXPECTED_NAMES = {"image-cnn", "text-transformer", "slow-storage"}
NAMES = sorted(EXPECTED_NAMES)


def test_builtin_names() -> None:
    assert set(BUILTINS) == EXPECTED_NAMES


@pytest.mark.parametrize("name", NAMES)
def test_builtin_metadata(name: str) -> None:
    w = BUILTINS[name]()
    assert isinstance(w, Workload)
    assert w.name == name
    assert w.description and "\n" not in w.description
    assert w.batch_size == 32


@pytest.mark.parametrize("name", NAMES)
def test_builtin_dataset_len_and_pickle(name: str) -> None:
    w = BUILTINS[name]()
    ds = w.dataset()
    assert len(ds) == 4096
    clone = pickle.loads(pickle.dumps(ds))
    assert len(clone) == len(ds)
    # The model and loss travel to trial processes too.
    pickle.loads(pickle.dumps(w.model()))
    pickle.loads(pickle.dumps(w.loss))
    pickle.loads(pickle.dumps(w.model))
    pickle.loads(pickle.dumps(w.dataset))


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_builtin_trains(name: str) -> None:
    torch.manual_seed(0)
    w = BUILTINS[name]()
    model = w.model()
    model.train()
    optimizer = w.optimizer(model.parameters())
    before = [p.detach().clone() for p in model.parameters()]
    loader = DataLoader(w.dataset(), batch_size=8, num_workers=0, shuffle=True)
    it = iter(loader)
    for _ in range(2):
        x, y = next(it)
        optimizer.zero_grad(set_to_none=True)
        loss = w.loss(model(x), y)
        assert loss.ndim == 0
        assert math.isfinite(loss.item())
        loss.backward()
        optimizer.step()
    after = list(model.parameters())
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))


def test_image_cnn_samples() -> None:
    ds = BUILTINS["image-cnn"]().dataset()
    raw, label = ds.raw(5)
    assert raw.dtype == torch.uint8 and raw.shape == (3, 32, 32)
    raw2, label2 = ds.raw(5)
    assert torch.equal(raw, raw2) and label == label2
    assert 0 <= label < 10

    torch.manual_seed(123)
    x1, y1 = ds[5]
    torch.manual_seed(123)
    x2, y2 = ds[5]
    assert x1.dtype == torch.float32 and x1.shape == (3, 32, 32)
    assert y1.dtype == torch.int64 and y1.ndim == 0 and int(y1) == label
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    # Different samples differ.
    assert not torch.equal(ds.raw(6)[0], raw)


def test_image_cnn_augmentation_is_random() -> None:
    ds = BUILTINS["image-cnn"]().dataset()
    torch.manual_seed(0)
    samples = [ds[5][0] for _ in range(8)]
    assert any(not torch.equal(samples[0], s) for s in samples[1:])


def test_text_transformer_samples() -> None:
    ds = BUILTINS["text-transformer"]().dataset()
    x, y = ds[5]
    x2, y2 = ds[5]
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert x.shape == (64,) and y.shape == (64,)
    assert x.dtype == torch.int64 and y.dtype == torch.int64
    assert torch.equal(x[1:], y[:-1])  # target is the input shifted by one
    assert int(x.min()) >= 0 and int(x.max()) < 2000
    assert not torch.equal(ds[6][0], x)
    logits = BUILTINS["text-transformer"]().model()(x.unsqueeze(0))
    assert logits.shape == (1, 64, 2000)


def test_slow_storage_samples() -> None:
    from autotune.workload.builtins import _slow_storage

    assert _slow_storage.READ_LATENCY_S == 0.004
    ds = BUILTINS["slow-storage"]().dataset()
    x, y = ds[5]
    x2, y2 = ds[5]
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert x.shape == (256,) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and 0 <= int(y) < 10
    assert "time.sleep" in BUILTINS["slow-storage"]().description
