"""Framework adapters: what a user's function returns, turned into a :class:`Workload`.

A function named on the command line may return, besides an :class:`autotune.Workload`:

- a Hugging Face ``transformers.Trainer`` (:mod:`.huggingface`);
- ``(LightningModule, LightningDataModule)``, optionally with a Lightning ``Trainer`` third
  for its precision, clipping and accumulation (:mod:`.lightning`).

Each adapter reads the framework's objects into a plain :class:`Workload` (the model, the
dataset, the collate function, the optimizer the framework builds, its clipping, and the
baseline knob values its arguments set); nothing else in the tuner knows which framework a
workload came from. The frameworks are imported only when the returned object is theirs.
"""

from __future__ import annotations

import sys
from typing import Any

from autotune.workload._contract import Workload


def as_workload(returned: Any) -> Workload | None:
    """The :class:`Workload` a framework's object stands for; None when ``returned`` is no
    framework object this package knows."""
    transformers = sys.modules.get("transformers")
    if transformers is not None and isinstance(returned, transformers.Trainer):
        from autotune.workload.frameworks.huggingface import from_trainer

        return from_trainer(returned)
    if sys.modules.get("lightning") is not None or sys.modules.get("pytorch_lightning"):
        from autotune.workload.frameworks.lightning import from_lightning, is_lightning

        if is_lightning(returned):
            return from_lightning(returned)
    return None


__all__ = ["as_workload"]
