"""A real Hugging Face model, unwrapped: ``BertForSequenceClassification`` built from a small
config (nothing downloaded), fed dict batches with the labels inside; it computes its own loss."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification

from autotune.workload._contract import Workload

VOCAB = 100
LENGTH = 16
NUM_SAMPLES = 256
NUM_LABELS = 3


def bert() -> BertForSequenceClassification:
    return BertForSequenceClassification(
        BertConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=LENGTH,
            num_labels=NUM_LABELS,
        )
    )


class Sentences(Dataset[dict[str, torch.Tensor]]):
    """Random token ids with a padding mask and a label, as a tokenized dataset has them."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, VOCAB, (NUM_SAMPLES, LENGTH), generator=g)
        lengths = torch.randint(2, LENGTH + 1, (NUM_SAMPLES,), generator=g)
        self.mask = (torch.arange(LENGTH) < lengths.unsqueeze(1)).long()
        self.labels = torch.randint(0, NUM_LABELS, (NUM_SAMPLES,), generator=g)

    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {
            "input_ids": self.ids[index] * self.mask[index],
            "attention_mask": self.mask[index],
            "labels": self.labels[index],
        }


def workload() -> Workload:
    return Workload(
        model=bert,
        dataset=Sentences,
        loss=None,  # the model computes it from the batch's labels: output.loss
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-3),
        name="hf-bert",
        batch_size=16,
    )


def make_dataset() -> Any:
    return Sentences()
