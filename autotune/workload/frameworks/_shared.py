"""What the framework adapters share: handing out the model, and reading a DataLoader."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, SequentialSampler

from autotune.errors import WorkloadError


class ModuleSource:
    """Hands out the user's module: itself the first time (a trial builds one), a copy of it
    every later time (the profile builds one per precision and layout, and a layout change is
    made in place); and builds an optimizer for whichever module handed out owns the
    parameters it is given."""

    def __init__(
        self, module: nn.Module, build_optimizer: Callable[[nn.Module], torch.optim.Optimizer]
    ) -> None:
        self._module = module
        self._handed: list[nn.Module] = []
        self._build_optimizer = build_optimizer

    def model(self) -> nn.Module:
        module = self._module if not self._handed else copy.deepcopy(self._module)
        self._handed.append(module)
        return module

    def optimizer(self, params: Iterable[Any]) -> torch.optim.Optimizer:
        """The framework's optimizer for the module whose parameters ``params`` are; for
        other parameters (the probe's throwaway one), the same class and hyper-parameters over
        them."""
        given = list(params)
        ids = {id(p) for p in given}
        for module in self._handed:
            if ids and ids == {id(p) for p in module.parameters()}:
                return self._build_optimizer(module)
        built = self._build_optimizer(copy.deepcopy(self._module))
        takes = inspect.signature(type(built).__init__).parameters
        defaults = {k: v for k, v in built.defaults.items() if k in takes and k != "params"}
        return type(built)(given, **defaults)


def loader_knobs(loader: DataLoader[Any], where: str) -> tuple[int, dict[str, Any]]:
    """The batch size of ``loader`` and the knob values it runs with (the baseline's)."""
    batches = loader.batch_sampler
    if type(batches) is not BatchSampler:
        raise WorkloadError(
            f"{where} builds its DataLoader with a custom batch_sampler, whose batches autotune "
            "cannot resize; pass batch_size= (and a sampler=, if any) to the DataLoader instead"
        )
    knobs: dict[str, Any] = {
        "num_workers": loader.num_workers,
        "pin_memory": loader.pin_memory,
    }
    if loader.num_workers > 0:
        knobs["persistent_workers"] = loader.persistent_workers
        knobs["prefetch_factor"] = loader.prefetch_factor
    return batches.batch_size, knobs


def loader_kwargs(loader: DataLoader[Any]) -> dict[str, Any]:
    """Keyword arguments that rebuild ``loader`` with other loader knobs: its sampler (a
    random or sequential one as ``shuffle``), its workers' set-up function and its random
    generator, as Lightning itself re-instantiates a DataLoader to inject a sampler."""
    # A plain BatchSampler's (made from batch_size, or passed): the one that orders samples.
    sampler = getattr(loader.batch_sampler, "sampler", loader.sampler)
    kwargs: dict[str, Any] = {}
    if isinstance(sampler, RandomSampler) and not sampler.replacement:
        kwargs["shuffle"] = True
    elif isinstance(sampler, SequentialSampler):
        kwargs["shuffle"] = False
    else:
        kwargs.update(shuffle=False, sampler=sampler)
    for name in ("worker_init_fn", "generator"):
        value = getattr(loader, name, None)
        if value:
            kwargs[name] = value
    return kwargs
