"""Each DataLoader worker takes 0.5 s to start (``worker_init_fn`` sleeps), as workers that
open files or connections do: what ``persistent_workers`` saves at every epoch start."""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload

NUM_SAMPLES = 256
WORKER_START_S = 0.5


def slow_start(worker_id: int) -> None:
    time.sleep(WORKER_START_S)


def make_dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(NUM_SAMPLES, 16, generator=g), torch.randint(0, 4, (NUM_SAMPLES,), generator=g)
    )


def workload() -> Workload:
    return Workload(
        model=lambda: nn.Linear(16, 4),
        dataset=make_dataset,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name="slow-worker-start",
        batch_size=16,
        dataloader_kwargs={"worker_init_fn": slow_start},
    )
