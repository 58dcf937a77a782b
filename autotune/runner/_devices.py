"""Which GPU a trial process may see: exactly the one being tuned, as its ``cuda:0``.

bf16 support, pinned memory, CUDA contexts and the caching allocator all belong to the current
device of a process; a trial that could see every GPU would create contexts on, or read the
properties of, devices other than the one tuned. The probe and every trial get the same
``CUDA_VISIBLE_DEVICES``, so the device the job records is the device its trials ran on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from autotune.errors import ConfigError
from autotune.measure import VISIBLE_ENV, visible_devices
from autotune.runner._ranks import check_gpu_count

_CUDA = re.compile(r"^cuda(?::(\d+))?$")


@dataclass(frozen=True)
class TrialDevice:
    """The device a trial process is told to use, and the environment that makes it so."""

    #: What the trial process resolves: ``cpu``, ``auto`` or ``cuda:0``.
    device: str
    #: ``CUDA_VISIBLE_DEVICES`` for the trial process: one GPU (ordinal or UUID), or "" for none.
    visible_devices: str
    #: The N of ``--device cuda:N``, as this process numbers its GPUs.
    requested_index: int | None = None

    def environment(self) -> dict[str, str]:
        return {VISIBLE_ENV: self.visible_devices}


def trial_device(requested: str, environ: Mapping[str, str], count: int = 1) -> TrialDevice:
    """Map ``--device`` onto one visible GPU for the trial process (``count`` GPUs from it on,
    one per rank, for a trial of several ranks).

    ``cuda:N`` means the N-th device this process could see: the N-th entry of an inherited
    ``CUDA_VISIBLE_DEVICES`` (an ordinal, a ``GPU-`` UUID or a MIG id), else ordinal N. A CPU
    trial sees no GPU at all. ``auto`` keeps the first visible GPU, if any.

    Example:
        >>> trial_device("cuda:1", {"CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-bb"})
        TrialDevice(device='cuda:0', visible_devices='GPU-bb', requested_index=1)
        >>> trial_device("cuda", {}, count=2)
        TrialDevice(device='cuda:0', visible_devices='0,1', requested_index=0)
    """
    inherited = environ.get(VISIBLE_ENV)
    entries = visible_devices(environ)
    if requested == "cpu":
        return TrialDevice("cpu", "")
    if requested == "auto":
        chosen = [str(i) for i in range(count)] if entries is None else entries[:count]
        return TrialDevice("auto", ",".join(chosen), 0 if chosen else None)
    match = _CUDA.match(requested)
    if match is None:
        return TrialDevice(requested, inherited or "")  # the trial process refuses it, in words
    index = int(match.group(1) or 0)
    if entries is None:
        return TrialDevice("cuda:0", ",".join(str(i) for i in range(index, index + count)), index)
    if index >= len(entries):
        raise ConfigError(
            f"--device {requested}: {VISIBLE_ENV}={inherited!r} makes only {len(entries)} GPU(s) "
            "visible; pick an index below that or widen CUDA_VISIBLE_DEVICES"
        )
    if count > 1:
        check_gpu_count(count, len(entries) - index)
    return TrialDevice("cuda:0", ",".join(entries[index : index + count]), index)


def rank_devices(requested: str, nproc: int, gpus: int | None = None) -> list[str]:
    """The devices a trial of ``nproc`` ranks on ``requested`` holds, as ``--device`` names:
    the CPU once (its ranks share it), else ``nproc`` GPUs from ``requested``'s index on (one
    per rank, as :func:`trial_device` makes them visible). ``gpus``: the GPUs this process
    sees (``torch.cuda.device_count()`` by default); too few for the ranks is a
    :class:`ConfigError` naming both numbers.

    Example:
        >>> rank_devices("cuda:1", 2, gpus=4)
        ['cuda:1', 'cuda:2']
        >>> rank_devices("cpu", 4)
        ['cpu']
    """
    if requested == "cpu":
        return ["cpu"]
    match = _CUDA.match(requested)
    if requested == "auto" or match is not None:
        if gpus is None:
            import torch

            gpus = torch.cuda.device_count()
        if requested == "auto" and gpus == 0:
            return ["cpu"]
        index = int(match.group(1) or 0) if match is not None else 0
        if nproc > 1:
            check_gpu_count(nproc, max(0, gpus - index))
        return [f"cuda:{index + rank}" for rank in range(nproc)]
    return [requested]  # not a device: the probe refuses it, in words
