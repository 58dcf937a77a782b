"""pytorch-autotune 2.0's three benchmark models at its shapes, in plain torch, as workloads.

``resnet18`` (32 px images, batch 128), ``resnet50`` (224 px, batch 64) and ``transformer``
(6 encoder layers, 128 tokens, batch 32), each trained with AdamW (lr 1e-3, the peer's
default). The ResNets are torchvision's architectures written out here (torchvision is not a
dependency); the transformer's width (512, 8 heads, feed-forward 2048) and vocabulary (8192)
are this file's choice, as the peer's package does not state them. The data are synthetic and
held in memory (nothing is downloaded): autotune's workloads read them through a DataLoader,
and :func:`example_batch` hands the peer one batch of the same shapes, as its ``autotune()``
takes. ``benchmarks/peer.py`` runs both tuners on them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from autotune import Workload

CLASSES = 1000
VOCAB = 8192
SEQ_LEN = 128
LR = 1e-3


class _Block(nn.Module):
    """ResNet's basic block (two 3x3 convolutions), as ResNet-18 stacks them."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False),
            nn.BatchNorm2d(planes),
            nn.ReLU(inplace=True),
            nn.Conv2d(planes, planes, 3, 1, 1, bias=False),
            nn.BatchNorm2d(planes),
        )
        self.shortcut = _shortcut(inplanes, planes * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.shortcut(x))


class _Bottleneck(nn.Module):
    """ResNet's bottleneck block (1x1, 3x3, 1x1), as ResNet-50 stacks them."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        out = planes * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(inplanes, planes, 1, bias=False),
            nn.BatchNorm2d(planes),
            nn.ReLU(inplace=True),
            nn.Conv2d(planes, planes, 3, stride, 1, bias=False),
            nn.BatchNorm2d(planes),
            nn.ReLU(inplace=True),
            nn.Conv2d(planes, out, 1, bias=False),
            nn.BatchNorm2d(out),
        )
        self.shortcut = _shortcut(inplanes, out, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.shortcut(x))


def _shortcut(inplanes: int, out: int, stride: int) -> nn.Module:
    if stride == 1 and inplanes == out:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out))


class ResNet(nn.Module):
    """torchvision's ResNet layout: a 7x7 stem, four stages, global pooling, a linear head."""

    def __init__(self, block: type[_Block | _Bottleneck], layers: tuple[int, ...]) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        stages: list[nn.Module] = []
        inplanes = 64
        for index, count in enumerate(layers):
            planes = 64 * 2**index
            for position in range(count):
                stride = 2 if index > 0 and position == 0 else 1
                stages.append(block(inplanes, planes, stride))
                inplanes = planes * block.expansion
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(inplanes, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class EncoderLM(nn.Module):
    """Token and learned position embeddings, 6 Transformer encoder layers, a vocabulary head."""

    def __init__(self, width: int = 512, heads: int = 8, layers: int = 6) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.position = nn.Parameter(torch.zeros(1, SEQ_LEN, width))
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens) + self.position))


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


class _InMemory(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``(input, target)`` pairs held as two tensors, made once from a fixed seed."""

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        self.inputs, self.targets = inputs, targets

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[index], self.targets[index]


def _images(count: int, size: int) -> _InMemory:
    g = torch.Generator().manual_seed(0)
    images = torch.randn(count, 3, size, size, generator=g)
    return _InMemory(images, torch.randint(0, CLASSES, (count,), generator=g))


def _tokens(count: int) -> _InMemory:
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, VOCAB, (count, SEQ_LEN + 1), generator=g)
    return _InMemory(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())


def adamw(parameters: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(parameters, lr=LR)


@dataclass(frozen=True)
class PeerModel:
    """A model, its dataset (enough samples for a few batches of the peer's size and for the
    larger batches autotune may try), its loss and the peer's batch size."""

    build: Callable[[], nn.Module]
    data: Callable[[], _InMemory]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    batch: int


MODELS = {
    "resnet18": PeerModel(
        lambda: ResNet(_Block, (2, 2, 2, 2)), lambda: _images(8192, 32), F.cross_entropy, 128
    ),
    "resnet50": PeerModel(
        lambda: ResNet(_Bottleneck, (3, 4, 6, 3)), lambda: _images(1024, 224), F.cross_entropy, 64
    ),
    "transformer": PeerModel(EncoderLM, lambda: _tokens(4096), lm_loss, 32),
}


def _workload(name: str) -> Workload:
    peer = MODELS[name]
    return Workload(
        name=f"peer-{name}",
        model=peer.build,
        dataset=peer.data,
        loss=peer.loss,
        optimizer=adamw,
        batch_size=peer.batch,
    )


def resnet18() -> Workload:
    return _workload("resnet18")


def resnet50() -> Workload:
    return _workload("resnet50")


def transformer() -> Workload:
    return _workload("transformer")


def example_batch(name: str, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of the peer's shape from the model's dataset, on ``device``."""
    peer = MODELS[name]
    data = peer.data()
    return data.inputs[: peer.batch].to(device), data.targets[: peer.batch].to(device)
