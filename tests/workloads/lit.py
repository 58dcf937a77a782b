"""A real Lightning workload: a small convolutional LightningModule and a DataModule whose
dataset augments its images on the CPU in ``__getitem__`` (a random crop and flip)."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

NUM_SAMPLES = 512
SIZE = 16


class Images(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (NUM_SAMPLES, 3, SIZE + 4, SIZE + 4), generator=g)
        self.labels = torch.randint(0, 10, (NUM_SAMPLES,), generator=g)

    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        top, left = torch.randint(0, 5, (2,)).tolist()
        image = self.images[index, :, top : top + SIZE, left : left + SIZE].float() / 255
        if torch.rand(()) < 0.5:
            image = image.flip(-1)
        return (image - 0.5) / 0.25, self.labels[index]


class Classifier(L.LightningModule):
    def __init__(self, lr: float = 1e-3) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
            nn.Linear(16 * 16, 10),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)

    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        images, labels = batch
        loss = nn.functional.cross_entropy(self(images), labels)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> dict[str, object]:
        optimizer = torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=0.05)
        return {"optimizer": optimizer}


class ImagesData(L.LightningDataModule):
    """The training DataLoader takes ``loader`` (e.g. ``exports["dataloader"]``) over its own
    ``batch_size=32, shuffle=True``."""

    def __init__(self, **loader: Any) -> None:
        super().__init__()
        self.loader = {"batch_size": 32, "shuffle": True, **loader}
        self.train: Images | None = None

    def setup(self, stage: str) -> None:
        self.train = Images()

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, torch.Tensor]]:
        assert self.train is not None
        return DataLoader(self.train, **self.loader)


def make() -> tuple[Classifier, ImagesData]:
    return Classifier(), ImagesData()


def make_with_trainer() -> tuple[Classifier, ImagesData, L.Trainer]:
    trainer = L.Trainer(
        accelerator="cpu",
        precision="bf16-mixed",
        gradient_clip_val=0.5,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    return Classifier(), ImagesData(), trainer


class Averaged(Classifier):
    """Overrides the per-step hooks: records each call (and whether gradients are there) and
    keeps an exponential moving average of its weights after every batch, as users do."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.average = [p.detach().clone() for p in self.parameters()]

    def _has_grads(self) -> bool:
        return all(p.grad is not None for p in self.parameters())

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.calls.append(f"start {batch_idx}")

    def on_before_backward(self, loss: torch.Tensor) -> None:
        self.calls.append("before_backward")

    def on_after_backward(self) -> None:
        self.calls.append("after_backward")

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.calls.append(f"before_optimizer_step grads={self._has_grads()}")

    def on_before_zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        self.calls.append(f"before_zero_grad grads={self._has_grads()}")

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.calls.append(f"end {batch_idx} loss={'loss' in outputs}")
        with torch.no_grad():
            for kept, p in zip(self.average, self.parameters(), strict=True):
                kept.lerp_(p, 0.1)


class AsksTheTrainer(Classifier):
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.trainer.global_step  # noqa: B018 - raises: no Trainer outside fit()


def make_averaged() -> tuple[Classifier, ImagesData]:
    return Averaged(), ImagesData()


def make_asking_the_trainer() -> tuple[Classifier, ImagesData]:
    return AsksTheTrainer(), ImagesData()
