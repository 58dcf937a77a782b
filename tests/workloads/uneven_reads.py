"""A loader whose batches take uneven time: about one batch in four (picked by a hash of the
collating process and its count of batches, so no worker gets all of them) waits 40 ms, the
others 4 ms, as reads from an object store with a slow tail do. Samples are free; the model is
a tiny linear layer."""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, default_collate

from autotune.workload._contract import Workload

NUM_SAMPLES = 8192
FAST_READ_S = 0.004
SLOW_READ_S = 0.04


class FreeSamples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.full((16,), float(index % 7)), torch.tensor(index % 4)


_collated = itertools.count()


def collate_unevenly(samples: list[Any]) -> Any:
    slow = hash((os.getpid(), next(_collated))) % 4 == 0
    time.sleep(SLOW_READ_S if slow else FAST_READ_S)
    return default_collate(samples)


def workload() -> Workload:
    return Workload(
        model=lambda: nn.Linear(16, 4),
        dataset=FreeSamples,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        collate_fn=collate_unevenly,
        name="uneven-reads",
        batch_size=8,
    )
