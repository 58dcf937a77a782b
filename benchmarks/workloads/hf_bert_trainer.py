"""A Hugging Face ``Trainer`` script as users write one, for benchmarks/frameworks.py.

A small BERT built from a ``BertConfig`` (nothing downloaded), a dataset that tokenizes its text
in ``__getitem__`` with a word-level fast tokenizer built in memory, ``DataCollatorWithPadding``
and the ``TrainingArguments`` defaults but for the output folder. Tuned as users tune it:
``autotune run benchmarks/workloads/hf_bert_trainer.py:make_trainer``; the benchmark then calls
``make_trainer(**exports["hf_training_arguments"])`` and ``trainer.train()``.
"""

from __future__ import annotations

import tempfile
from typing import Any

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from torch.utils.data import Dataset
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    DataCollatorWithPadding,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)

WORDS = [f"w{i}" for i in range(2000)]
MAX_LENGTH = 64
NUM_SAMPLES = 4096
NUM_LABELS = 4


def tokenizer() -> PreTrainedTokenizerFast:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    vocab = {token: i for i, token in enumerate(specials + WORDS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", model_max_length=MAX_LENGTH
    )


class Reviews(Dataset[dict[str, Any]]):
    """Random sentences of 8 to 64 words with a label, tokenized when read."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        lengths = torch.randint(8, MAX_LENGTH, (NUM_SAMPLES,), generator=g).tolist()
        words = torch.randint(0, len(WORDS), (NUM_SAMPLES, MAX_LENGTH), generator=g).tolist()
        self.texts = [
            " ".join(WORDS[w] for w in row[:n]) for row, n in zip(words, lengths, strict=True)
        ]
        self.labels = torch.randint(0, NUM_LABELS, (NUM_SAMPLES,), generator=g).tolist()
        self.tokenizer = tokenizer()

    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, index: int) -> dict[str, Any]:
        encoded = self.tokenizer(self.texts[index], truncation=True, max_length=MAX_LENGTH)
        return {**encoded, "labels": self.labels[index]}


def make_trainer(**arguments: Any) -> Trainer:
    """The script's Trainer; ``arguments`` are added to its ``TrainingArguments`` (the
    benchmark passes the recommendation's exports and its run length)."""
    model = BertForSequenceClassification(
        BertConfig(
            vocab_size=len(WORDS) + 4,
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=512,
            max_position_embeddings=MAX_LENGTH,
            num_labels=NUM_LABELS,
        )
    )
    arguments.setdefault("output_dir", tempfile.mkdtemp(prefix="hf-bert-trainer-"))
    reviews = Reviews()
    return Trainer(
        model=model,
        args=TrainingArguments(**arguments),
        train_dataset=reviews,
        data_collator=DataCollatorWithPadding(reviews.tokenizer),
    )
