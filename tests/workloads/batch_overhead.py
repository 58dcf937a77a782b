"""A loader whose cost is per batch, not per sample: samples are free, and collating a batch
waits 10 ms whatever its size (as a batched read from a database or a service would)."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, default_collate

from autotune.workload._contract import Workload

NUM_SAMPLES = 8192
BATCH_LATENCY_S = 0.01


class FreeSamples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.full((16,), float(index % 7)), torch.tensor(index % 4)


def collate_with_latency(samples: list[Any]) -> Any:
    time.sleep(BATCH_LATENCY_S)  # one read per batch
    return default_collate(samples)


def workload() -> Workload:
    return Workload(
        model=lambda: nn.Linear(16, 4),
        dataset=FreeSamples,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        collate_fn=collate_with_latency,
        name="batch-overhead",
        batch_size=8,
    )
