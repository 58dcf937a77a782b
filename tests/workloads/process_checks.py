"""Workloads that check what their trial process was given, failing on purpose in the model
factory: ``:visible_devices`` reports the GPUs it was shown, ``:sigkill`` is killed by a SIGKILL
it sends itself while using little memory."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload


def _report_visible_devices() -> nn.Module:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    raise RuntimeError(f"visible={visible!r} count={torch.cuda.device_count()}")


def _killed() -> nn.Module:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def _workload(model: Callable[[], nn.Module], name: str) -> Workload:
    return Workload(
        model=model,
        dataset=lambda: TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))),
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name=name,
    )


def visible_devices() -> Workload:
    return _workload(_report_visible_devices, "visible-devices")


def sigkill() -> Workload:
    return _workload(_killed, "sigkill")
