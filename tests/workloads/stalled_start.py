"""A step of known speed (it sleeps 10 ms) that the machine slows to a third for the first
0.5 s of steps, as a noisy neighbour on a shared machine would."""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload

STEP_S = 0.01
STALL_S = 0.5
STALL_FACTOR = 3


class Stalled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 4)
        self.first_step: float | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        now = time.perf_counter()
        self.first_step = self.first_step or now
        stalled = now - self.first_step < STALL_S
        time.sleep(STEP_S * (STALL_FACTOR if stalled else 1))
        return self.linear(x)


def workload() -> Workload:
    g = torch.Generator().manual_seed(0)
    return Workload(
        model=Stalled,
        dataset=lambda: TensorDataset(
            torch.randn(256, 16, generator=g), torch.randint(0, 4, (256,), generator=g)
        ),
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name="stalled-start",
        batch_size=8,
    )
