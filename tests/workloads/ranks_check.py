"""A tiny workload that writes down, per rank, what its trial process saw: its process group,
its cores, and the samples it loaded (into ``$AUTOTUNE_TEST_RANKS_DIR``); ``fails_on_rank1``'s
rank 1 raises mid-run, while rank 0 waits in an all-reduce."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from autotune.workload._contract import Workload

NUM_SAMPLES = 256
NUM_FEATURES = 16
#: Bytes each rank's model holds besides its weights (``$AUTOTUNE_TEST_BALLAST_BYTES``).
BALLAST_ENV = "AUTOTUNE_TEST_BALLAST_BYTES"


def _out() -> Path:
    return Path(os.environ["AUTOTUNE_TEST_RANKS_DIR"])


def _rank() -> str:
    return os.environ.get("RANK", "single")


class RecordedSamples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(NUM_SAMPLES, NUM_FEATURES, generator=g)
        self.y = torch.randint(0, 4, (NUM_SAMPLES,), generator=g)

    def __len__(self) -> int:
        return NUM_SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        with (_out() / f"samples-{_rank()}-{os.getpid()}.txt").open("a") as samples:
            samples.write(f"{index}\n")
        return self.x[index], self.y[index]


class Recorded(nn.Module):
    def __init__(self, fail_after: int | None = None) -> None:
        super().__init__()
        self.linear = nn.Linear(NUM_FEATURES, 4)
        self.fail_after = fail_after
        self.calls = 0
        # Not a parameter or buffer: DDP would broadcast it.
        self.ballast = torch.ones(int(os.environ.get(BALLAST_ENV, "0")) // 4)
        group = torch.distributed.is_initialized()
        seen = {
            "pid": os.getpid(),
            "affinity": sorted(os.sched_getaffinity(0)),
            "threads": torch.get_num_threads(),
            "world": torch.distributed.get_world_size() if group else None,
            "backend": torch.distributed.get_backend() if group else None,
        }
        (_out() / f"model-{_rank()}-{os.getpid()}.json").write_text(json.dumps(seen))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.fail_after is not None and _rank() == "1" and self.calls > self.fail_after:
            raise RuntimeError("rank 1 gives up on purpose")
        return self.linear(x)


class IndexStream(IterableDataset[int]):
    """The samples' indices as a stream, every worker its share by worker; the collate
    function (:func:`collate_recorded`) records the indices a batch holds and builds it."""

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        first, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(first, NUM_SAMPLES, step))


_SAMPLES = RecordedSamples.__new__(RecordedSamples)
_generator = torch.Generator().manual_seed(0)
_SAMPLES.x = torch.randn(NUM_SAMPLES, NUM_FEATURES, generator=_generator)
_SAMPLES.y = torch.randint(0, 4, (NUM_SAMPLES,), generator=_generator)


def collate_recorded(indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.stack([_SAMPLES[i][0] for i in indices]), torch.stack(
        [_SAMPLES[i][1] for i in indices]
    )


def _workload(name: str, fail_after: int | None, stream: bool = False) -> Workload:
    return Workload(
        model=lambda: Recorded(fail_after),
        dataset=IndexStream if stream else RecordedSamples,
        collate_fn=collate_recorded if stream else None,
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name=name,
        batch_size=16,
    )


def workload() -> Workload:
    return _workload("ranks-check", None)


def fails_on_rank1() -> Workload:
    return _workload("ranks-fail", 3)


def stream() -> Workload:
    return _workload("ranks-stream", None, stream=True)
