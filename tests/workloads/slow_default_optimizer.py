"""A workload whose optimizer, as the workload builds it, takes 100 ms a step (it spins, as a
loop over many parameters would compute), and none with ``foreach``: the profile's optimizer
probe times what that implementation saves a step. A tenth of a second stands out of what a
busy 2-core machine adds to a step of a tiny model (tens of milliseconds, waiting for its
intra-op threads)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload

OPTIMIZER_S = 0.1


class LoopingSGD(torch.optim.SGD):
    """SGD whose default implementation (neither ``foreach`` nor ``fused`` asked for) spins
    for :data:`OPTIMIZER_S` a step."""

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        if not self.defaults.get("foreach") and not self.defaults.get("fused"):
            end = time.perf_counter() + OPTIMIZER_S
            while time.perf_counter() < end:
                pass
        return super().step(closure)


def _optimizer(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return LoopingSGD(params, lr=0.1)


def workload() -> Workload:
    g = torch.Generator().manual_seed(0)
    return Workload(
        model=lambda: nn.Linear(16, 4),
        dataset=lambda: TensorDataset(
            torch.randn(4096, 16, generator=g), torch.randint(0, 4, (4096,), generator=g)
        ),
        loss=nn.CrossEntropyLoss(),
        optimizer=_optimizer,
        name="slow-default-optimizer",
        batch_size=32,
    )
