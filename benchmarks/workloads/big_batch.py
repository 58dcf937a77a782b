"""A workload built to mislead "a bigger batch is faster" and "bf16 is faster".

A contrastive encoder, trained as SimCLR and CLIP train: each sample holds two views, both
are embedded, and the loss scores every view against every other view of the batch (a B x B
similarity matrix over wide embeddings). The loss's cost per sample grows with the batch, so
past a middle batch size a larger batch is slower per sample; and its wide matmuls and softmax
gain nothing from bf16 on a CPU without native bf16 (they pay for the casts).

Written the way a user writes a workload file: ``python -m autotune run
benchmarks/workloads/big_batch.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from autotune import Workload

NUM_SAMPLES = 8192
NUM_FEATURES = 64
#: Width of the embedding the loss compares, B x B x EMBED_DIM multiply-adds per step.
EMBED_DIM = 2048
TEMPERATURE = 0.1


class TwoViews(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``(float32[2, 64] two noisy views of one point, int64 index)``."""

    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < NUM_SAMPLES:
            raise IndexError(index)
        g = torch.Generator().manual_seed(index)
        point = torch.randn(NUM_FEATURES, generator=g)
        views = point + 0.1 * torch.randn(2, NUM_FEATURES, generator=g)
        return views, torch.tensor(index)


class Encoder(nn.Module):
    """Both views through one MLP to a wide, normalised embedding: ``(B, 2, EMBED_DIM)``."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(NUM_FEATURES, NUM_FEATURES), nn.ReLU(), nn.Linear(NUM_FEATURES, EMBED_DIM)
        )

    def forward(self, views: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.net(views), dim=-1)


def contrastive_loss(embeddings: torch.Tensor, _index: torch.Tensor) -> torch.Tensor:
    """InfoNCE over the batch: each first view must pick its own second view among all B."""
    first, second = embeddings[:, 0], embeddings[:, 1]
    logits = first @ second.T / TEMPERATURE
    labels = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2


def workload() -> Workload:
    return Workload(
        name="big-batch",
        model=Encoder,
        dataset=TwoViews,
        loss=contrastive_loss,
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3),
        batch_size=64,
        description="Contrastive encoder with an in-batch B x B loss over 2048-wide "
        "embeddings: larger batches cost more per sample; bf16 does not pay on a "
        "CPU without native bf16.",
    )
