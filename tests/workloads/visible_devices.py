"""A workload that fails on purpose, saying which GPUs its trial process was shown."""

from __future__ import annotations

import os

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload


def _report() -> nn.Module:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    raise RuntimeError(f"visible={visible!r} count={torch.cuda.device_count()}")


def workload() -> Workload:
    return Workload(
        model=_report,
        dataset=lambda: TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))),
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name="visible-devices",
    )
