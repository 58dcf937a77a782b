"""A workload whose optimizer step takes 20 ms (it sleeps, as a large model's would compute)
beside a forward and backward of a fraction of a millisecond: accumulating gradients over
micro-batches saves nearly all of each micro-step's time but a ``k``-th."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload

OPTIMIZER_S = 0.02


class SlowSGD(torch.optim.SGD):
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        time.sleep(OPTIMIZER_S)
        return super().step(closure)


def _optimizer(params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    return SlowSGD(params, lr=0.1)


def workload() -> Workload:
    g = torch.Generator().manual_seed(0)
    return Workload(
        model=lambda: nn.Linear(16, 4),
        dataset=lambda: TensorDataset(
            torch.randn(1024, 16, generator=g), torch.randint(0, 4, (1024,), generator=g)
        ),
        loss=nn.CrossEntropyLoss(),
        optimizer=_optimizer,
        name="slow-optimizer",
        batch_size=32,
    )
