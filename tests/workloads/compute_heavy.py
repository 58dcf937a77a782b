"""A compute-bound workload: a wide MLP on samples already in memory (loading is free)."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload

NUM_SAMPLES = 1024
WIDTH = 1024


def make_dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(NUM_SAMPLES, WIDTH, generator=g),
        torch.randint(0, 10, (NUM_SAMPLES,), generator=g),
    )


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Linear(WIDTH, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10)
    )


def workload() -> Workload:
    return Workload(
        model=make_model,
        dataset=make_dataset,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.01),
        name="compute-heavy",
        batch_size=64,
    )
