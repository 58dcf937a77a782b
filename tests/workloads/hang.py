"""A workload whose storage stalls: the first read works, every later one blocks forever.

The first read lets the probe learn the sample's shape; a trial's loader then hangs, as one
stuck on a dead network mount would, so the trial never finishes its warm-up.
"""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune.workload._contract import Workload


class HangingDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self) -> None:
        self.reads = 0

    def __len__(self) -> int:
        return 512

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.reads += 1
        while self.reads > 1:
            time.sleep(1.0)
        return torch.randn(16), torch.tensor(index % 4)


def make_model() -> nn.Module:
    return nn.Linear(16, 4)


def workload() -> Workload:
    return Workload(
        model=make_model,
        dataset=HangingDataset,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name="hang",
        description="Dataset __getitem__ never returns.",
    )
