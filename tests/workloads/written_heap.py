"""A step that writes 384 MiB of host memory it keeps (a scratch buffer of the model's), as a
step on a CPU writes the heap it retains from step to step: after DataLoader workers are forked
at an epoch's start, the first step copies each page it writes (copy-on-write), which
``persistent_workers`` saves."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload

NUM_SAMPLES = 4096
SCRATCH_BYTES = 384 * 2**20


class WritesScratch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 4)
        self.register_buffer(
            "scratch", torch.zeros(SCRATCH_BYTES, dtype=torch.uint8), persistent=False
        )

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.scratch.add_(1)
        return self.linear(inputs)


def make_dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(NUM_SAMPLES, 16, generator=g), torch.randint(0, 4, (NUM_SAMPLES,), generator=g)
    )


def workload() -> Workload:
    return Workload(
        model=WritesScratch,
        dataset=make_dataset,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name="written-heap",
        batch_size=16,
    )
