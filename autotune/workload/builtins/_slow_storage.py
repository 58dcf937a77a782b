"""The ``slow-storage`` built-in: a dataset whose reads are slow, with a small MLP.

Each ``__getitem__`` calls ``time.sleep`` to stand in for storage latency (a network
filesystem or an object store), then returns a small sample built from the index. The sleep
holds no CPU, so DataLoader workers beyond the number of cores still pay off: this workload
shows the tuner picking more workers than cores when reads, not compute, are the bottleneck.
"""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune.workload._contract import Workload

NAME = "slow-storage"
NUM_SAMPLES = 4096
NUM_FEATURES = 256
NUM_CLASSES = 10
#: Simulated storage latency per sample read, in seconds.
READ_LATENCY_S = 0.004


class SlowStorageDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``(float32[256], int64 label)`` samples; each read sleeps ``READ_LATENCY_S`` first."""

    def __init__(self, length: int = NUM_SAMPLES, latency_s: float = READ_LATENCY_S) -> None:
        self.length = length
        self.latency_s = latency_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.length:
            raise IndexError(index)
        time.sleep(self.latency_s)  # stands in for a network filesystem / object store read
        g = torch.Generator().manual_seed(index)
        label = int(torch.randint(0, NUM_CLASSES, (1,), generator=g))
        features = torch.randn(NUM_FEATURES, generator=g)
        features[label] += 2.0  # make the label learnable from the features
        return features, torch.tensor(label, dtype=torch.int64)


class SmallMLP(nn.Module):
    """``256 -> 256 -> 128 -> 10`` MLP with ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(NUM_FEATURES, 256),
            nn.ReLU(),
            nn.Linear(256, 128),
            nn.ReLU(),
            nn.Linear(128, NUM_CLASSES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def slow_storage() -> Workload:
    """Build the ``slow-storage`` workload."""
    return Workload(
        model=SmallMLP,
        dataset=SlowStorageDataset,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
        name=NAME,
        batch_size=32,
        description=(
            f"Small MLP on a dataset whose reads sleep {READ_LATENCY_S * 1000:g} ms per sample: "
            "time.sleep stands in for network-filesystem/object-store latency, so more "
            "DataLoader workers than cores pay off."
        ),
    )
