"""Compute-bound on a GPU: an MLP of about 270 M parameters in fp32 on small samples in memory.

``compute_heavy`` is compute-bound on a CPU only: on an H100 its step launches in less time
than the loader takes to collate a batch, so its loader really is the bottleneck there. So was
a 100 M-parameter MLP on 4096-wide samples (2026-11-22, H100: 3.6 ms of device time a step,
about 3 ms to collate its 256 samples, data wait 0.58). Here a step at batch 256 is about
400 GFLOP, about 10 ms of device time, while collating 256 samples of 256 values takes ~2 ms.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload

NUM_SAMPLES = 2048
WIDTH = 256
HIDDEN = 8192
HIDDEN_LAYERS = 4


def workload() -> Workload:
    def dataset() -> TensorDataset:
        g = torch.Generator().manual_seed(0)
        return TensorDataset(
            torch.randn(NUM_SAMPLES, WIDTH, generator=g),
            torch.randint(0, 10, (NUM_SAMPLES,), generator=g),
        )

    return Workload(
        model=lambda: nn.Sequential(
            nn.Linear(WIDTH, HIDDEN),
            nn.ReLU(),
            *(
                layer
                for _ in range(HIDDEN_LAYERS)
                for layer in (nn.Linear(HIDDEN, HIDDEN), nn.ReLU())
            ),
            nn.Linear(HIDDEN, 10),
        ),
        dataset=dataset,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.01),
        name="gpu-heavy",
        batch_size=256,
    )
