"""Workloads for the step's own knobs: ``:ragged`` pads each batch to its longest sequence (its
shapes change from batch to batch), ``:static`` is the same model on fixed-length sequences,
``:allocator`` reports how CUDA's caching allocator was set up (failing on purpose in its first
forward pass) and ``:no_flags`` trains with an optimizer that takes neither foreach nor fused."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune.workload._contract import Workload

VOCABULARY = 64
SAMPLES = 256


class _Sequences(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Token sequences of length 8..31 (``ragged``) or all of length 16, each with a label."""

    def __init__(self, ragged: bool) -> None:
        g = torch.Generator().manual_seed(0)
        lengths = torch.randint(8, 32, (SAMPLES,), generator=g) if ragged else [16] * SAMPLES
        self.tokens = [torch.randint(0, VOCABULARY, (int(n),), generator=g) for n in lengths]
        self.labels = torch.randint(0, 2, (SAMPLES,), generator=g)

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.tokens[index], self.labels[index]


def _pad(samples: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = nn.utils.rnn.pad_sequence([s[0] for s in samples], batch_first=True)
    return tokens, torch.stack([s[1] for s in samples])


class _BagOfTokens(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCABULARY, 32)
        self.head = nn.Linear(32, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.embed(tokens)).mean(dim=1))


class _ReportAllocator(_BagOfTokens):
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        segments = torch.cuda.memory._snapshot()["segments"] if tokens.is_cuda else []
        expandable = any(segment.get("is_expandable") for segment in segments)
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
        raise RuntimeError(f"expandable={expandable} conf={conf!r}")


def _workload(name: str, model: Any, ragged: bool, optimizer: Any = None) -> Workload:
    return Workload(
        model=model,
        dataset=lambda: _Sequences(ragged),
        loss=nn.CrossEntropyLoss(),
        optimizer=optimizer or (lambda params: torch.optim.AdamW(params, lr=1e-3)),
        collate_fn=_pad,
        name=name,
        batch_size=16,
    )


def ragged() -> Workload:
    return _workload("ragged", _BagOfTokens, ragged=True)


def static() -> Workload:
    return _workload("static", _BagOfTokens, ragged=False)


def allocator() -> Workload:
    return _workload("allocator", _ReportAllocator, ragged=False)


def no_flags() -> Workload:
    return _workload(
        "no-flags", _BagOfTokens, ragged=False, optimizer=lambda p: torch.optim.LBFGS(p)
    )
