"""A workload whose loss is NaN on every step (still differentiable)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload


def make_dataset() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(512, 16, generator=g), torch.randint(0, 4, (512,), generator=g)
    )


def make_model() -> nn.Module:
    return nn.Linear(16, 4)


def nan_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(output * float("nan"), target)


def workload() -> Workload:
    return Workload(
        model=make_model,
        dataset=make_dataset,
        loss=nan_loss,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name="nan-loss",
        description="Loss is NaN every step.",
    )
