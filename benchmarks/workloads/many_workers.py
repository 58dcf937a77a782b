"""A workload built to mislead the rule "DataLoader workers = CPU cores".

Every sample read waits 15 ms on (simulated) remote storage, as an object store or a network
filesystem makes a training job wait, and the model is a small MLP. The wait holds no CPU, so
the loader keeps scaling long past the cores: on a 2-core machine the best worker count is
tens of workers, where the rule of thumb gives 2 and PyTorch's default 0.

Written the way a user writes a workload file: ``python -m autotune run
benchmarks/workloads/many_workers.py``.
"""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune import Workload

#: Seconds each sample read waits on storage.
READ_LATENCY_S = 0.015
NUM_SAMPLES = 4096
NUM_FEATURES = 128
NUM_CLASSES = 10


class RemoteSamples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``(float32[128], int64 label)``; each read waits ``READ_LATENCY_S`` first."""

    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < NUM_SAMPLES:
            raise IndexError(index)
        time.sleep(READ_LATENCY_S)
        g = torch.Generator().manual_seed(index)
        label = int(torch.randint(0, NUM_CLASSES, (1,), generator=g))
        features = torch.randn(NUM_FEATURES, generator=g)
        features[label] += 2.0
        return features, torch.tensor(label)


def workload() -> Workload:
    return Workload(
        name="many-workers",
        model=lambda: nn.Sequential(
            nn.Linear(NUM_FEATURES, 128), nn.ReLU(), nn.Linear(128, NUM_CLASSES)
        ),
        dataset=RemoteSamples,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
        batch_size=32,
        description="Small MLP on samples that each wait 15 ms on storage: the best worker "
        "count is far above the cores.",
    )
