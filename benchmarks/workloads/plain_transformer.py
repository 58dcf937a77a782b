"""A 6-layer Transformer encoder trained with AdamW, in plain torch, sized for a small CPU.

The depth and sequence length of pytorch-autotune's transformer benchmark (6 layers, 128
tokens; it trains batch 32 on a GPU), narrowed to a width of 128 and a batch of 8 so that a
2-core CPU steps it in a fraction of a second: ``nn.TransformerEncoder`` layers, a token
embedding, a vocabulary head, AdamW with two parameter groups (no weight decay on biases and
norms, as most training scripts set it). Its tokens are made in memory from the sample index
(nothing is downloaded); the target of each token is the next one.

Written the way a user writes a workload file: ``python -m autotune run
benchmarks/workloads/plain_transformer.py``.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from autotune import Workload

VOCAB = 1000
SEQ_LEN = 128
LAYERS = 6
HEADS = 4
WIDTH = 128
FEED_FORWARD = 512
SAMPLES = 2048


class IndexTokens(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``(int64[SEQ_LEN] tokens, int64[SEQ_LEN] the tokens after them)``, drawn from a
    generator seeded with the sample's index."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < SAMPLES:
            raise IndexError(index)
        g = torch.Generator().manual_seed(index)
        tokens = torch.randint(0, VOCAB, (SEQ_LEN + 1,), generator=g)
        return tokens[:-1], tokens[1:]


class EncoderLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(
            WIDTH, HEADS, FEED_FORWARD, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))


def adamw(parameters: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """AdamW with weight decay on the matrices only, the usual two parameter groups."""
    params = list(parameters)
    return torch.optim.AdamW(
        [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=3e-4,
        betas=(0.9, 0.95),
    )


def language_model_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


def workload() -> Workload:
    return Workload(
        name="plain-transformer",
        model=EncoderLM,
        dataset=IndexTokens,
        loss=language_model_loss,
        optimizer=adamw,
        batch_size=8,
        description="6-layer Transformer encoder LM (width 128, 4 heads, seq 128, vocabulary "
        "1000, AdamW in two parameter groups, batch 8) on in-memory tokens.",
    )
