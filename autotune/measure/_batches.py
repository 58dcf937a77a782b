"""Moving batches to the device: plain copies, or the next batch copied on a side stream."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch


def map_tensors(data: Any, fn: Any) -> Any:
    """Apply ``fn`` to every tensor in a nested tuple/list/dict structure.

    Any mapping (a Hugging Face ``BatchEncoding`` is not a dict) comes back as a dict.
    """
    if isinstance(data, torch.Tensor):
        return fn(data)
    if isinstance(data, Mapping):
        return {key: map_tensors(value, fn) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        mapped = [map_tensors(value, fn) for value in data]
        return (
            type(data)(mapped)
            if isinstance(data, tuple) and not hasattr(data, "_fields")
            else mapped
            if isinstance(data, list)
            else type(data)(*mapped)
        )
    return data


def first_tensor(data: Any) -> torch.Tensor | None:
    if isinstance(data, torch.Tensor):
        return data
    values = (
        data.values()
        if isinstance(data, Mapping)
        else data
        if isinstance(data, (list, tuple))
        else ()
    )
    for value in values:
        found = first_tensor(value)
        if found is not None:
            return found
    return None


def batch_size_of(batch: Any) -> int:
    inputs = batch[0] if isinstance(batch, (list, tuple)) else batch
    tensor = first_tensor(inputs)
    return int(tensor.shape[0]) if tensor is not None and tensor.dim() > 0 else 1


def to_device(batch: Any, device: torch.device, channels_last: bool, non_blocking: bool) -> Any:
    def move(tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.to(device, non_blocking=non_blocking)
        if channels_last and tensor.dim() == 4:
            tensor = tensor.contiguous(memory_format=torch.channels_last)
        return tensor

    return map_tensors(batch, move)


class DevicePrefetcher:
    """Copies the next batch on a side CUDA stream while the current one computes.

    The idea of apex's ``data_prefetcher``: the host-to-device copy overlaps compute, and the
    compute stream waits on the copy only when it needs the batch.
    """

    def __init__(self, batches: Iterator[Any], device: torch.device, channels_last: bool) -> None:
        self._batches = batches
        self._device = device
        self._channels_last = channels_last
        self._stream = torch.cuda.Stream(device=device)
        self._next: Any = None
        self._preload()

    def _preload(self) -> None:
        host_batch = next(self._batches)
        with torch.cuda.stream(self._stream):
            self._next = to_device(host_batch, self._device, self._channels_last, True)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        torch.cuda.current_stream(self._device).wait_stream(self._stream)
        batch = self._next

        def record(tensor: torch.Tensor) -> torch.Tensor:
            tensor.record_stream(torch.cuda.current_stream(self._device))
            return tensor

        map_tensors(batch, record)
        self._preload()
        return batch
