"""A real Hugging Face ``Trainer`` as a workload: a BERT from a config (nothing downloaded), a
dataset that tokenizes its text in ``__getitem__`` with a real (in-memory) fast tokenizer, and
the ``TrainingArguments`` defaults but for the batch size and the output folder."""

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
    TrainerCallback,
    TrainingArguments,
)

WORDS = [f"w{i}" for i in range(200)]
LENGTH = 32
NUM_SAMPLES = 512
NUM_LABELS = 3


def tokenizer() -> PreTrainedTokenizerFast:
    vocab = {
        "[PAD]": 0,
        "[UNK]": 1,
        "[CLS]": 2,
        "[SEP]": 3,
        **{w: i + 4 for i, w in enumerate(WORDS)},
    }
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]", model_max_length=LENGTH
    )


class Sentences(Dataset[dict[str, Any]]):
    """Random sentences, tokenized when read, with a label; an extra column the model does not
    take (``text``), which the Trainer's collator drops (``remove_unused_columns``)."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        lengths = torch.randint(4, LENGTH, (NUM_SAMPLES,), generator=g).tolist()
        words = torch.randint(0, len(WORDS), (NUM_SAMPLES, LENGTH), generator=g).tolist()
        self.texts = [
            " ".join(WORDS[w] for w in row[:n]) for row, n in zip(words, lengths, strict=True)
        ]
        self.labels = torch.randint(0, NUM_LABELS, (NUM_SAMPLES,), generator=g).tolist()
        self.tokenizer = tokenizer()

    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, index: int) -> dict[str, Any]:
        encoded = self.tokenizer(self.texts[index], truncation=True, max_length=LENGTH)
        return {**encoded, "labels": self.labels[index], "text": self.texts[index]}


def make_trainer() -> Trainer:
    model = BertForSequenceClassification(
        BertConfig(
            vocab_size=len(WORDS) + 4,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=LENGTH,
            num_labels=NUM_LABELS,
        )
    )
    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="hf-trainer-"),
        per_device_train_batch_size=16,
        report_to="none",
        use_cpu=True,
    )
    sentences = Sentences()
    return Trainer(
        model=model,
        args=args,
        train_dataset=sentences,
        data_collator=DataCollatorWithPadding(sentences.tokenizer),
    )


class CountsSteps(TrainerCallback):
    """A user's callback: counts the step events the Trainer's loop sends it."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.events.append("step_begin")

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.events.append("pre_optimizer_step")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.events.append(f"step_end {state.global_step}")

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.events.append("substep_end")


def make_trainer_with_callback() -> Trainer:
    trainer = make_trainer()
    trainer.add_callback(CountsSteps())
    return trainer


class NeedsTrain(TrainerCallback):
    """A callback that reads what only train() sets up."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        kwargs["train_dataloader"].batch_size  # noqa: B018 - train() passes it, autotune not


def make_trainer_with_a_callback_needing_train() -> Trainer:
    trainer = make_trainer()
    trainer.add_callback(NeedsTrain())
    return trainer
