"""The host divided among the ranks sharing it: one rank's bound on loader workers.

A ``num_workers`` found best for one process with the whole host becomes that many workers per
rank once a launch runs several ranks on the host (``torchrun --nproc-per-node 8``): the
workers searched for one rank are the host's bound divided among the ranks, and a
configuration whose workers across every rank exceed the host's bound is infeasible.
"""

from __future__ import annotations

from autotune.space._config import Config
from autotune.space._facts import DeviceInfo
from autotune.space._knobs import default_max_workers


def max_workers_per_rank(device: DeviceInfo) -> int:
    """The most loader workers searched in one rank: the bound of the whole host (one rank's
    cores times the ranks sharing it), divided among those ranks.

    Example:
        >>> max_workers_per_rank(DeviceInfo(type="cpu", name="x", memory_bytes=1, cpu_count=8))
        32
        >>> max_workers_per_rank(
        ...     DeviceInfo(type="cpu", name="x", memory_bytes=1, cpu_count=4, host_share=2)
        ... )
        16
    """
    share = max(1, device.host_share)
    return max(1, default_max_workers(device.cpu_count * share) // share)


def over_host(device: DeviceInfo, config: Config) -> str | None:
    """Why ``config``'s workers on every rank sharing the host are more than it holds, or None."""
    share = device.host_share
    bound = max_workers_per_rank(device)
    if share <= 1 or config.num_workers <= bound:
        return None
    return (
        f"num_workers={config.num_workers} on each of {share} ranks is "
        f"{config.num_workers * share} loader workers, more than this host's "
        f"{device.cpu_count * share} cores hold ({bound * share} at most)"
    )
