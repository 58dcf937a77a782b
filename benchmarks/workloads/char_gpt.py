"""A small character-level GPT, as karpathy/nanoGPT's shakespeare-char trains one, in plain torch.

Pre-norm transformer blocks (causal self-attention through ``scaled_dot_product_attention``,
a GELU MLP), learned positions, a 65-character vocabulary, AdamW, batch 32: the shape of
nanoGPT's char-level model, smaller so that a 2-core CPU steps it in milliseconds. Its data is
a deterministic token stream built in memory (nothing is downloaded), with a little structure
(a repeating pattern under noise) so the loss can fall; each sample is a window of
``BLOCK`` tokens and the next token of each.

A model of this kind is where ``torch.compile`` tempts: many small kernels that inductor fuses,
but tens of seconds to compile on a small CPU, against a run that may not repay them.

Written the way a user writes a workload file: ``python -m autotune run
benchmarks/workloads/char_gpt.py``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from autotune import Workload

VOCAB = 65
BLOCK = 64
LAYERS = 4
HEADS = 4
WIDTH = 128
#: Tokens in the stream: about a million, as shakespeare-char's training split holds.
TOKENS = 1_000_000


def token_stream() -> torch.Tensor:
    """``int64[TOKENS]``: a repeating pattern of the vocabulary with a tenth of it noise."""
    g = torch.Generator().manual_seed(0)
    pattern = torch.randint(0, VOCAB, (997,), generator=g)
    stream = pattern.repeat(TOKENS // len(pattern) + 1)[:TOKENS].clone()
    noisy = torch.rand(TOKENS, generator=g) < 0.1
    stream[noisy] = torch.randint(0, VOCAB, (int(noisy.sum()),), generator=g)
    return stream


class CharWindows(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``(int64[BLOCK] tokens, int64[BLOCK] the tokens after them)`` at each offset."""

    def __init__(self) -> None:
        self.tokens = token_stream()

    def __len__(self) -> int:
        return len(self.tokens) - BLOCK

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(index)
        window = self.tokens[index : index + BLOCK + 1]
        return window[:-1], window[1:]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.norm2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(
            nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(WIDTH, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


class CharGPT(nn.Module):
    """``int64[B, BLOCK]`` tokens to ``float32[B, BLOCK, VOCAB]`` logits."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)
        self.positions = nn.Embedding(BLOCK, WIDTH)
        self.blocks = nn.Sequential(*(Block() for _ in range(LAYERS)))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tokens(tokens) + self.positions(positions)
        return self.head(self.norm(self.blocks(x)))


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def workload() -> Workload:
    return Workload(
        name="char-gpt",
        model=CharGPT,
        dataset=CharWindows,
        loss=next_token_loss,
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.1),
        batch_size=32,
        description="nanoGPT-like character-level GPT (4 layers, width 128, block 64, "
        "vocabulary 65, AdamW, batch 32) on an in-memory token stream.",
    )
