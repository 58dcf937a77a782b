"""A step that allocates and fills a 64 MiB buffer, beyond what glibc serves from its heap by
default: with glibc's defaults the buffer is mapped afresh and every page of it faulted in at
each step; a process that retains freed memory reuses it (``retain_freed_memory``)."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload

#: Floats of the scratch buffer: 64 MiB, above glibc's largest adaptive mmap threshold (32 MiB).
SCRATCH_FLOATS = 16 * 2**20


class ScratchEachStep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scratch = torch.ones(SCRATCH_FLOATS)
        return self.linear(x) + scratch[-1] - 1.0


def workload() -> Workload:
    g = torch.Generator().manual_seed(0)
    return Workload(
        model=ScratchEachStep,
        dataset=lambda: TensorDataset(torch.randn(256, 16, generator=g),
                                      torch.randint(0, 2, (256,), generator=g)),
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.01),
        name="fresh-pages",
        batch_size=32,
    )
