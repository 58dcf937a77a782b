"""A trial measured as one rank of a DDP job: the model, the sampler and the loop's decisions.

A trial of ``--nproc-per-node N`` runs as N processes with a process group initialised (see
:mod:`autotune.runner._ranks`); inside each, the loop is the single-process one with three
changes, all no-ops without a process group: the model is wrapped in
:class:`~torch.nn.parallel.DistributedDataParallel` (each backward all-reduces the
gradients), a :class:`~torch.utils.data.DistributedSampler` gives each rank its shard of a
map-style dataset (an iterable one: every N-th item of its stream, :class:`RankShard`), and
every decision to stop stepping (compilation done, warm-up settled,
window long enough) is rank 0's, broadcast to all: a rank that stopped one step before the
others would leave them waiting in an all-reduce for ever.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler, IterableDataset


def is_distributed() -> bool:
    """Whether this process is one rank of an initialised process group."""
    return dist.is_available() and dist.is_initialized()


def world_size() -> int:
    """Ranks in the process group; 1 without one."""
    return dist.get_world_size() if is_distributed() else 1


def wrap_model(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``model`` in :class:`DistributedDataParallel` when this process is a rank, else as is."""
    if not is_distributed():
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = (
        [device.index if device.index is not None else 0] if device.type == "cuda" else None
    )
    return DistributedDataParallel(model, device_ids=device_ids)


def shard_loader_kwargs(dataset: Any, kwargs: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """DataLoader arguments with this rank's :class:`DistributedSampler` in place of
    ``shuffle``, as a DDP script sets them; unchanged without a process group, for an iterable
    dataset (:func:`shard_dataset` shards it) or where the workload gives its own sampler."""
    if (
        not is_distributed()
        or isinstance(dataset, IterableDataset)
        or "sampler" in kwargs
        or "batch_sampler" in kwargs
    ):
        return kwargs
    sharded = dict(kwargs)
    shuffle = bool(sharded.pop("shuffle", True))
    sharded["sampler"] = DistributedSampler(dataset, shuffle=shuffle, seed=seed)
    return sharded


class RankShard(IterableDataset[Any]):
    """One rank's shard of an iterable dataset: every ``world``-th item of the stream its
    iterator yields (in a loader worker, that worker's stream), from the ``rank``-th on, as
    :class:`~torch.utils.data.IterableDataset`'s documentation splits a stream among workers.

    The ranks' shards are disjoint, so the samples every rank counts add up to each sample
    once; each rank still reads the items it skips, as a script sharding a stream it cannot
    seek does (the cost is the trial's).

    Example:
        >>> class Stream(IterableDataset):
        ...     def __iter__(self):
        ...         return iter(range(7))
        >>> list(RankShard(Stream(), 1, 3))
        [1, 4]
    """

    def __init__(self, dataset: IterableDataset[Any], rank: int, world: int) -> None:
        self.dataset = dataset
        self.rank = rank
        self.world = world

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(iter(self.dataset), self.rank, None, self.world)

    def __len__(self) -> int:
        # Where the stream has a length (a TypeError where it has none, as DataLoader expects).
        length = len(self.dataset)  # type: ignore[arg-type]
        return max(0, -(-(length - self.rank) // self.world))


def shard_dataset(dataset: Any) -> Any:
    """``dataset``, an iterable one as this rank's :class:`RankShard` in a process group of
    several ranks (a map-style one is sharded by its sampler, :func:`shard_loader_kwargs`)."""
    if not isinstance(dataset, IterableDataset) or world_size() == 1:
        return dataset
    return RankShard(dataset, dist.get_rank(), world_size())


def rank0_decides(flag: bool, device: torch.device) -> bool:
    """Rank 0's ``flag`` on every rank (a one-element broadcast); ``flag`` without a group."""
    if not is_distributed():
        return flag
    where = device if dist.get_backend() == "nccl" else torch.device("cpu")
    value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=where)
    dist.broadcast(value, src=0)
    return bool(value.item())
