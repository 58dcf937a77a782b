"""A Lightning script as users write one, for benchmarks/frameworks.py.

A small convolutional ``LightningModule`` and a ``LightningDataModule`` whose dataset decodes
and augments its images on the CPU in ``__getitem__`` (a random crop, a flip and a brightness
jitter of 40x40 uint8 images into 32x32 floats), with the DataLoader the DataModule builds
(``batch_size=32, shuffle=True``, PyTorch's other defaults). Tuned as users tune it:
``autotune run benchmarks/workloads/lit_images.py:make``; the benchmark then builds the
DataModule with ``exports["dataloader"]``, the module with ``exports["optimizer"]`` and the
``Trainer`` with ``exports["lightning_trainer"]``.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

NUM_SAMPLES = 16384
STORED, SIZE = 40, 32


class Photos(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(
            0, 256, (NUM_SAMPLES, 3, STORED, STORED), dtype=torch.uint8, generator=g
        )
        self.labels = torch.randint(0, 10, (NUM_SAMPLES,), generator=g)

    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        top, left = torch.randint(0, STORED - SIZE + 1, (2,)).tolist()
        image = self.images[index, :, top : top + SIZE, left : left + SIZE].float() / 255
        if torch.rand(()) < 0.5:
            image = image.flip(-1)
        image = (image * (0.8 + 0.4 * torch.rand(()))).clamp(0, 1)
        return (image - 0.5) / 0.25, self.labels[index]


class Classifier(L.LightningModule):
    def __init__(self, lr: float = 1e-3, **optimizer: Any) -> None:
        super().__init__()
        self.lr = lr
        self.optimizer = optimizer
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
            nn.Linear(32 * 16, 10),
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

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.lr, **self.optimizer)


class PhotosData(L.LightningDataModule):
    def __init__(self, **loader: Any) -> None:
        super().__init__()
        self.loader = {"batch_size": 32, "shuffle": True, **loader}
        self.train: Photos | None = None

    def setup(self, stage: str) -> None:
        self.train = Photos()

    def train_dataloader(self) -> DataLoader[tuple[torch.Tensor, torch.Tensor]]:
        assert self.train is not None
        return DataLoader(self.train, **self.loader)


def make() -> tuple[Classifier, PhotosData]:
    return Classifier(), PhotosData()
