"""Models whose forward takes keyword arguments, fed dict batches the way Hugging Face's Trainer
feeds them: a plain-torch stand-in for a transformers model (``forward(input_ids,
attention_mask, labels=None)``)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from autotune.workload._contract import Workload

VOCAB = 50
LENGTH = 12
NUM_SAMPLES = 256
NUM_CLASSES = 3


class TokenClassifier(nn.Module):
    """Mean of masked token embeddings, then a linear head; computes its loss given labels."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.head = nn.Linear(16, NUM_CLASSES)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        labels: torch.Tensor | None = None,
    ) -> Any:
        mask = attention_mask.unsqueeze(-1).to(self.embed.weight.dtype)
        logits = self.head((self.embed(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1))
        if labels is None:
            return logits
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


class OneDictArgument(TokenClassifier):
    """The same model written to take the whole dict as one argument."""

    def forward(self, batch: dict[str, torch.Tensor]) -> Any:  # type: ignore[override]
        return super().forward(batch["input_ids"], batch["attention_mask"])


class Tokens(Dataset[Any]):
    """Random token sequences with a padding mask; labels beside the inputs or inside them."""

    def __init__(self, labels_inside: bool) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, VOCAB, (NUM_SAMPLES, LENGTH), generator=g)
        lengths = torch.randint(1, LENGTH + 1, (NUM_SAMPLES,), generator=g)
        self.mask = (torch.arange(LENGTH) < lengths.unsqueeze(1)).long()
        self.labels = torch.randint(0, NUM_CLASSES, (NUM_SAMPLES,), generator=g)
        self.labels_inside = labels_inside

    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, index: int) -> Any:
        inputs = {"input_ids": self.ids[index], "attention_mask": self.mask[index]}
        if self.labels_inside:
            return {**inputs, "labels": self.labels[index]}
        return inputs, self.labels[index]


def _sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1)


def workload() -> Workload:
    """Dict inputs beside the target, a loss function: ``loss(model(**inputs), target)``."""
    return Workload(
        model=TokenClassifier,
        dataset=lambda: Tokens(labels_inside=False),
        loss=nn.CrossEntropyLoss(),
        optimizer=_sgd,
        name="keyword-inputs",
    )


def model_loss() -> Workload:
    """Labels inside the dict and the loss computed by the model, as Hugging Face's are."""
    return Workload(
        model=TokenClassifier,
        dataset=lambda: Tokens(labels_inside=True),
        loss=None,
        optimizer=_sgd,
        name="model-loss",
    )


def positional() -> Workload:
    """A model that takes the dict as one argument: ``model_inputs="positional"``."""
    return Workload(
        model=OneDictArgument,
        dataset=lambda: Tokens(labels_inside=False),
        loss=nn.CrossEntropyLoss(),
        optimizer=_sgd,
        name="one-dict-argument",
        model_inputs="positional",
    )


def positional_left_auto() -> Workload:
    """The same model without the override: the dict is unpacked and the call fails."""
    return Workload(
        model=OneDictArgument,
        dataset=lambda: Tokens(labels_inside=False),
        loss=nn.CrossEntropyLoss(),
        optimizer=_sgd,
        name="one-dict-argument-auto",
    )
