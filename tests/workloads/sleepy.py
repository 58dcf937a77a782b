"""An input-bound workload: every sample read sleeps 20 ms; the model is a tiny linear layer."""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune.workload._contract import Workload

NUM_SAMPLES = 256
READ_LATENCY_S = 0.02


class SleepyDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(READ_LATENCY_S)  # storage latency
        return torch.full((16,), float(index % 7)), torch.tensor(index % 4)


def workload() -> Workload:
    return Workload(
        model=lambda: nn.Linear(16, 4),
        dataset=SleepyDataset,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name="sleepy",
        batch_size=8,
    )
