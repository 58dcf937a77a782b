"""A workload whose model's forward raises a ValueError."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload


class BrokenModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.my_layer = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("shape mismatch in my_layer: expected 16 features")


def make_dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(512, 16, generator=g), torch.randint(0, 4, (512,), generator=g)
    )


def workload() -> Workload:
    return Workload(
        model=BrokenModel,
        dataset=make_dataset,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name="raises",
        description="Forward raises ValueError.",
    )
