"""CUDA's caching allocator with expandable segments (``expandable_segments``).

By default the allocator reserves fixed-size segments, and a batch whose tensors change size
from step to step leaves holes in them that no later tensor fits: reserved memory grows past
what is in use, and the largest batch that fits shrinks. With expandable segments it maps more
memory into one segment as needed instead. The allocator reads its settings from
``PYTORCH_CUDA_ALLOC_CONF`` when CUDA starts, so a trial sets it first; a process whose CUDA
has started already changes it through ``torch.cuda.memory._set_allocator_settings``, which
applies to the segments reserved from then on.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

import torch

#: The variable the allocator reads its settings from; torch 2.9 and later also read
#: ``PYTORCH_ALLOC_CONF``, which is the one extended where a process sets it.
ALLOC_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"
_NEWER_ENV = "PYTORCH_ALLOC_CONF"
EXPANDABLE = "expandable_segments:True"


def with_expandable_segments(settings: str | None) -> str:
    """``settings`` (the allocator's ``key:value,...``) with expandable segments on.

    Example:
        >>> with_expandable_segments("max_split_size_mb:128,expandable_segments:False")
        'max_split_size_mb:128,expandable_segments:True'
        >>> with_expandable_segments(None)
        'expandable_segments:True'
    """
    kept = [
        item.strip()
        for item in (settings or "").split(",")
        if item.strip() and not item.strip().startswith("expandable_segments:")
    ]
    return ",".join([*kept, EXPANDABLE])


def expandable_segments_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variable to set before Python starts for expandable segments, keeping any other
    allocator settings it already holds."""
    environ = os.environ if environ is None else environ
    name = _NEWER_ENV if _NEWER_ENV in environ else ALLOC_CONF_ENV
    return {name: with_expandable_segments(environ.get(name))}


def use_expandable_segments() -> None:
    """Turn expandable segments on in this process: in the environment the allocator reads
    when CUDA starts, and in the running allocator if CUDA has started already."""
    os.environ.update(expandable_segments_environment())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        with contextlib.suppress(AttributeError):  # a torch without the setter reads the variable
            torch.cuda.memory._set_allocator_settings(EXPANDABLE)
