"""What a user brings: a model trained today with batch size 12 (not a multiple of 8)."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload


def make_dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(1024, 32, generator=g), torch.randint(0, 4, (1024,), generator=g)
    )


def workload() -> Workload:
    return Workload(
        model=lambda: nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)),
        dataset=make_dataset,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name="batch-12",
        batch_size=12,
    )
