"""A step that keeps every core busy, and a neighbour on a shared machine that holds back the
first model the process builds: each of its steps waits nine times its own work first, as if
the cores were taken from it. A profile's first precision/layout meets that; the next, and a
second timing of the first, build models of their own."""

from __future__ import annotations

import dataclasses
import itertools
import time

import stalled_start
import torch
from torch import nn

from autotune.workload._contract import Workload

HELD_FACTOR = 9
_built = itertools.count()


class CoreTaken(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 4)
        # A product big enough for every intra-op thread: the step's own work.
        self.big = torch.randn(384, 384)
        self.held = next(_built) == 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        started = time.perf_counter()
        work = torch.mm(self.big, self.big).sum() * 0
        if self.held:
            time.sleep(HELD_FACTOR * (time.perf_counter() - started))
        return self.linear(x) + work


def workload() -> Workload:
    # stalled_start's data, loss and optimizer around this model (its file is beside this one).
    return dataclasses.replace(stalled_start.workload(), model=CoreTaken, name="core-taken")
