"""Configurations known to be infeasible without running them."""

from __future__ import annotations

from dataclasses import dataclass, field

from autotune.space import Config

#: Batches a DataLoader worker holds ahead when prefetch_factor is left at its default.
_DEFAULT_PREFETCH = 2


def memory_pressure(config: Config, host_budget: bool) -> int:
    """How much memory a configuration holds, relative to others of the same precision.

    On a device budget only the batch size matters; on a host budget every batch that workers
    hold ahead also counts.
    """
    if not host_budget or config.num_workers == 0:
        return config.batch_size
    in_flight = config.num_workers * (config.prefetch_factor or _DEFAULT_PREFETCH)
    return config.batch_size * (1 + in_flight)


@dataclass
class InfeasibleSet:
    """Remembers configurations that ran out of memory; skips those that need at least as much."""

    host_budget: bool
    _failures: list[Config] = field(default_factory=list)

    def add(self, config: Config) -> None:
        self._failures.append(config)

    def reason(self, config: Config) -> str | None:
        """Why ``config`` cannot fit, or None if nothing known rules it out."""
        pressure = memory_pressure(config, self.host_budget)
        for failed in self._failures:
            if (
                failed.amp == config.amp
                and config.batch_size >= failed.batch_size
                and pressure >= memory_pressure(failed, self.host_budget)
            ):
                return (
                    f"batch_size={failed.batch_size} with amp={failed.amp} already ran out of "
                    "memory, and this configuration needs at least as much"
                )
        return None
