"""The ``image-cnn`` built-in: a small CNN on synthetic CIFAR-sized images.

The images are synthetic: each is generated from its index (a fixed per-class pattern plus
per-sample noise, as ``uint8``), so nothing is read from disk. ``__getitem__`` then runs the
CPU-side augmentation a real image pipeline runs (random crop with 4-pixel padding, random
horizontal flip, conversion to float, per-channel normalisation). That work stands in for the
per-sample CPU cost of a real pipeline; it is lighter than decoding JPEGs from disk, so real
datasets usually gain more from extra DataLoader workers than this one does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from autotune.workload._contract import Workload

NAME = "image-cnn"
NUM_SAMPLES = 4096
NUM_CLASSES = 10
IMAGE_SIZE = 32
CHANNELS = 3
PADDING = 4
#: Per-channel mean and standard deviation used for normalisation (CIFAR-10's).
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
_PATTERN_SEED = 1_000_003
_NOISE = 64


class SyntheticImages(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Synthetic ``3x32x32`` uint8 images in 10 classes, augmented on the CPU per sample.

    Sample ``i`` before augmentation (see :meth:`raw`) depends only on ``i``. The augmentation
    draws from torch's global RNG, as torchvision transforms do, so it differs per epoch and
    per DataLoader worker; with the same ``torch.manual_seed`` it repeats exactly.
    """

    def __init__(self, length: int = NUM_SAMPLES) -> None:
        self.length = length
        g = torch.Generator().manual_seed(_PATTERN_SEED)
        # One low-frequency colour pattern per class, so the task is learnable.
        coarse = torch.randint(0, 256, (NUM_CLASSES, CHANNELS, 4, 4), generator=g)
        self.patterns = F.interpolate(
            coarse.float(), size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", align_corners=False
        ).to(torch.int16)
        self.mean = torch.tensor(MEAN).view(CHANNELS, 1, 1)
        self.std = torch.tensor(STD).view(CHANNELS, 1, 1)

    def __len__(self) -> int:
        return self.length

    def raw(self, index: int) -> tuple[torch.Tensor, int]:
        """The un-augmented ``uint8`` image and label of sample ``index``."""
        if not 0 <= index < self.length:
            raise IndexError(index)
        g = torch.Generator().manual_seed(index)
        label = int(torch.randint(0, NUM_CLASSES, (1,), generator=g))
        noise = torch.randint(
            -_NOISE, _NOISE + 1, (CHANNELS, IMAGE_SIZE, IMAGE_SIZE), generator=g, dtype=torch.int16
        )
        image = (self.patterns[label] + noise).clamp_(0, 255).to(torch.uint8)
        return image, label

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, label = self.raw(index)
        # Random crop with zero padding.
        padded = F.pad(image, (PADDING, PADDING, PADDING, PADDING))
        top, left = torch.randint(0, 2 * PADDING + 1, (2,)).tolist()
        image = padded[:, top : top + IMAGE_SIZE, left : left + IMAGE_SIZE]
        # Random horizontal flip.
        if torch.rand(()) < 0.5:
            image = image.flip(-1)
        # To float in [0, 1], then per-channel normalisation.
        x = (image.float().div_(255.0) - self.mean) / self.std
        return x.contiguous(), torch.tensor(label, dtype=torch.int64)


def _conv_bn_relu(c_in: int, c_out: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel_size=3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class SmallCNN(nn.Module):
    """Conv-BN-ReLU blocks, global average pooling and a linear classifier (~250k params)."""

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _conv_bn_relu(CHANNELS, 16, stride=1),  # 32x32
            _conv_bn_relu(16, 32, stride=2),  # 16x16
            _conv_bn_relu(32, 64, stride=2),  # 8x8
            _conv_bn_relu(64, 128, stride=2),  # 4x4
            _conv_bn_relu(128, 128, stride=1),  # 4x4
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x)).flatten(1)
        return self.classifier(x)


def image_cnn() -> Workload:
    """Build the ``image-cnn`` workload."""
    return Workload(
        model=SmallCNN,
        dataset=SyntheticImages,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
        name=NAME,
        batch_size=32,
        description=(
            "Small CNN on synthetic 3x32x32 uint8 images (generated, not read from disk); "
            "per-sample CPU crop/flip/normalise stands in for a real image pipeline's "
            "augmentation cost."
        ),
    )
