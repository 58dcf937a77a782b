"""A workload whose process is killed by SIGKILL (sent by itself) while using little memory."""

from __future__ import annotations

import os
import signal

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload


def _killed() -> nn.Module:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def workload() -> Workload:
    return Workload(
        model=_killed,
        dataset=lambda: TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))),
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name="sigkill",
    )
