"""A healthy workload with 4-D image inputs (3x8x8 per sample) and a tiny conv model."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload


class TinyConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(self.pool(x).flatten(1))


def make_dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(512, 3, 8, 8, generator=g)
    y = torch.randint(0, 4, (512,), generator=g)
    return TensorDataset(x, y)


def workload() -> Workload:
    return Workload(
        model=TinyConv,
        dataset=make_dataset,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name="four-d",
        description="Tiny conv net on 3x8x8 inputs.",
    )
