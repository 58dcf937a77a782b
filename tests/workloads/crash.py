"""A workload whose process dies by a real segfault in the first forward pass."""

from __future__ import annotations

import ctypes

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload


class SegfaultModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ctypes.string_at(0)  # reads address 0: SIGSEGV
        return self.linear(x)


def make_dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(512, 16, generator=g), torch.randint(0, 4, (512,), generator=g)
    )


def workload() -> Workload:
    return Workload(
        model=SegfaultModel,
        dataset=make_dataset,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name="crash",
        description="Segfaults in the first forward pass.",
    )
