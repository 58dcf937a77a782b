"""A healthy, fast workload: a linear classifier on 512 random samples."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload

NUM_SAMPLES = 512
NUM_FEATURES = 16
NUM_CLASSES = 4


def make_dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(NUM_SAMPLES, NUM_FEATURES, generator=g)
    y = torch.randint(0, NUM_CLASSES, (NUM_SAMPLES,), generator=g)
    return TensorDataset(x, y)


def make_model() -> nn.Module:
    return nn.Linear(NUM_FEATURES, NUM_CLASSES)


def _workload(name: str) -> Workload:
    return Workload(
        model=make_model,
        dataset=make_dataset,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name=name,
        batch_size=32,
        description="Linear 16->4 on 512 random samples.",
    )


def workload() -> Workload:
    return _workload("tiny")


def other() -> Workload:
    return _workload("tiny-other")
