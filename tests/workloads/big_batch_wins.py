"""A workload whose loader pays a fixed 20 ms per batch (a request to remote storage, made in
the collate function), so larger batches are faster per sample and workers help; its
optimizer is SGD and it trains with batch 16 today."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset, default_collate

from autotune import Workload

#: Seconds each batch waits, whatever its size.
BATCH_LATENCY_S = 0.02


def collate(samples: list[Any]) -> Any:
    time.sleep(BATCH_LATENCY_S)
    return default_collate(samples)


def dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    inputs = torch.randn(2048, 32, generator=g)
    return TensorDataset(inputs, torch.randint(0, 4, (2048,), generator=g))


def workload() -> Workload:
    return Workload(
        name="big-batch-wins",
        model=lambda: nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)),
        dataset=dataset,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        collate_fn=collate,
        batch_size=16,
    )
