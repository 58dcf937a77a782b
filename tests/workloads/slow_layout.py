"""A tiny conv net whose step is far slower in channels_last: its forward waits 20 ms whenever
its input arrives in that layout, as a layout a CPU's kernels do not support runs slow."""

from __future__ import annotations

import dataclasses
import time

import four_d
import torch

from autotune.workload._contract import Workload

SLOW_LAYOUT_S = 0.02


class SlowInChannelsLast(four_d.TinyConv):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_contiguous(memory_format=torch.channels_last):
            time.sleep(SLOW_LAYOUT_S)
        return super().forward(x)


def workload() -> Workload:
    # four_d's data, loss and optimizer around this model (its file is beside this one).
    return dataclasses.replace(four_d.workload(), model=SlowInChannelsLast, name="slow-layout")
