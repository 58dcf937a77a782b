"""The ``text-transformer`` built-in: a small causal Transformer language model.

The token sequences are synthetic: sequence ``i`` is generated from ``i`` alone (a noisy
arithmetic progression over the vocabulary, so next-token prediction is learnable), and the
target is the input shifted by one token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from autotune.workload._contract import Workload

NAME = "text-transformer"
NUM_SAMPLES = 4096
VOCAB_SIZE = 2000
SEQ_LEN = 64
D_MODEL = 128
NUM_LAYERS = 2
NUM_HEADS = 4
FF_DIM = 256
#: Fraction of tokens replaced by a random token.
NOISE_RATE = 0.1


class SyntheticTokens(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Synthetic token sequences: ``(input[SEQ_LEN], target[SEQ_LEN])`` int64 pairs.

    Each sample draws ``SEQ_LEN + 1`` tokens from a generator seeded with its index; the
    input is the first ``SEQ_LEN`` and the target the last ``SEQ_LEN``.
    """

    def __init__(self, length: int = NUM_SAMPLES) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < self.length:
            raise IndexError(index)
        g = torch.Generator().manual_seed(index)
        start, step = torch.randint(1, VOCAB_SIZE, (2,), generator=g).tolist()
        tokens = (start + step * torch.arange(SEQ_LEN + 1)) % VOCAB_SIZE
        noisy = torch.rand(SEQ_LEN + 1, generator=g) < NOISE_RATE
        random_tokens = torch.randint(0, VOCAB_SIZE, (SEQ_LEN + 1,), generator=g)
        tokens = torch.where(noisy, random_tokens, tokens)
        return tokens[:-1].clone(), tokens[1:].clone()


class TinyTransformerLM(nn.Module):
    """Token + learned position embeddings, a causal Transformer encoder, a vocabulary head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB_SIZE, D_MODEL)
        self.pos = nn.Parameter(torch.zeros(1, SEQ_LEN, D_MODEL))
        nn.init.normal_(self.pos, std=0.02)
        layer = nn.TransformerEncoderLayer(
            d_model=D_MODEL,
            nhead=NUM_HEADS,
            dim_feedforward=FF_DIM,
            dropout=0.0,
            batch_first=True,
        )
        self.encoder = nn.TransformerEncoder(
            layer, num_layers=NUM_LAYERS, enable_nested_tensor=False
        )
        self.norm = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB_SIZE)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq_len = tokens.shape[1]
        x = self.embed(tokens) + self.pos[:, :seq_len]
        mask = nn.Transformer.generate_square_subsequent_mask(
            seq_len, device=tokens.device, dtype=x.dtype
        )
        x = self.encoder(x, mask=mask, is_causal=True)
        return self.head(self.norm(x))


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over ``(B*T, V)`` logits against ``(B*T,)`` next-token targets."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def text_transformer() -> Workload:
    """Build the ``text-transformer`` workload."""
    return Workload(
        model=TinyTransformerLM,
        dataset=SyntheticTokens,
        loss=lm_loss,
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3),
        name=NAME,
        batch_size=32,
        description=(
            "2-layer causal Transformer LM (vocab 2000, d_model 128, seq 64) on synthetic "
            "token sequences generated from the sample index."
        ),
    )
