"""``CUDA_VISIBLE_DEVICES``: which GPUs a process may see, read one way everywhere."""

from __future__ import annotations

from collections.abc import Mapping

VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


def visible_devices(environ: Mapping[str, str]) -> list[str] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES`` in ``environ`` (ordinals, ``GPU-`` UUIDs or MIG
    ids), in CUDA's order; None when it is unset (every GPU visible), [] when it hides all.

    Example:
        >>> visible_devices({"CUDA_VISIBLE_DEVICES": " GPU-aa, 3,"})
        ['GPU-aa', '3']
        >>> visible_devices({}) is None
        True
    """
    value = environ.get(VISIBLE_ENV)
    return None if value is None else [entry.strip() for entry in value.split(",") if entry.strip()]
