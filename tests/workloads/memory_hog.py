"""A workload whose samples are 1 MiB each, so host memory grows with the batch size.

A batch of ``B`` samples holds about ``B`` MiB (plus the same again per prefetched batch per
DataLoader worker); used to push a trial past a memory budget.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune.workload._contract import Workload

#: 262144 float32 values = 1 MiB per sample.
SAMPLE_FLOATS = 262_144
NUM_SAMPLES = 4096


class BigSamples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < NUM_SAMPLES:
            raise IndexError(index)
        # torch.full writes every element, so the 1 MiB is really resident.
        x = torch.full((SAMPLE_FLOATS,), float(index % 7) - 3.0, dtype=torch.float32)
        return x, torch.tensor(index % 4, dtype=torch.int64)


class MeanThenLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(1, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.mean(dim=1, keepdim=True))


def workload() -> Workload:
    return Workload(
        model=MeanThenLinear,
        dataset=BigSamples,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name="memory-hog",
        description="1 MiB per sample: about batch_size MiB per batch.",
    )
