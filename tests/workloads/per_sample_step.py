"""A step whose time is known and grows with the batch: its forward sleeps 0.5 ms per sample
(2,000 samples/s at every batch), as a compute-bound model's does past its smallest batches."""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload

SECONDS_PER_SAMPLE = 0.0005


class PerSample(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(SECONDS_PER_SAMPLE * x.shape[0])
        return self.linear(x)


def workload() -> Workload:
    g = torch.Generator().manual_seed(0)
    return Workload(
        model=PerSample,
        dataset=lambda: TensorDataset(torch.randn(1024, 16, generator=g),
                                      torch.randint(0, 4, (1024,), generator=g)),
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name="per-sample-step",
        batch_size=8,
    )
