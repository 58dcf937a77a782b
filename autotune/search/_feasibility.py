"""Configurations known to be infeasible without running them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from autotune.space import TORCH_DEFAULT_PREFETCH_FACTOR, Config


def _batches_ahead_per_worker(config: Config) -> int:
    """Batches each DataLoader worker holds ready; none without workers."""
    if config.num_workers == 0:
        return 0
    return config.prefetch_factor or TORCH_DEFAULT_PREFETCH_FACTOR


def needs_at_least_as_much_memory(config: Config, failed: Config) -> bool:
    """Whether ``config`` holds at least what ``failed`` held in every knob that costs memory.

    Batch size, workers, batches each worker holds ahead, pinned buffers, persistent workers,
    a batch prefetched to the device and freed memory kept by malloc only add memory as they
    grow or turn on. Precision and layout have no such order (autocast keeps fp32 weights plus
    cached half copies; channels_last may copy inputs), nor has torch.compile (it changes which
    activations are saved for backward, and its compile workers use host memory), nor the
    optimizer's implementation (foreach holds temporaries over every parameter), so they must
    be equal; expandable segments only let more fit. A configuration smaller in any one knob
    might fit, and is measured.
    """
    return (
        config.amp == failed.amp
        and config.channels_last == failed.channels_last
        and config.compile == failed.compile
        and config.optimizer_impl == failed.optimizer_impl
        and config.expandable_segments <= failed.expandable_segments
        and config.batch_size >= failed.batch_size
        and config.num_workers >= failed.num_workers
        and _batches_ahead_per_worker(config) >= _batches_ahead_per_worker(failed)
        and config.pin_memory >= failed.pin_memory
        and config.persistent_workers >= failed.persistent_workers
        and config.device_prefetch >= failed.device_prefetch
        and config.retain_freed_memory >= failed.retain_freed_memory
    )


@dataclass
class InfeasibleSet:
    """Remembers configurations that ran out of memory; skips those that need at least as much,
    and those ``over_host`` rules out (workers on every rank sharing the host, more than it
    holds)."""

    over_host: Callable[[Config], str | None] | None = None
    _failures: list[Config] = field(default_factory=list)
    #: Knob values (as written) a trial found the workload's step cannot use, set aside for
    #: the job, with that trial's error.
    _set_aside: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, config: Config) -> None:
        self._failures.append(config.normalized())

    def set_aside(self, config: Config, error: str) -> None:
        """Set aside the knob value an ``unsuited`` trial of ``config`` names: its error starts
        with ``KNOB=VALUE`` (see ``autotune.measure.UnsuitedValue``)."""
        knob, _, value = error.split(" ", 1)[0].partition("=")
        if knob in Config.model_fields and str(getattr(config, knob)) == value:
            self._set_aside[(knob, value)] = error

    def reason(self, config: Config) -> str | None:
        """Why ``config`` cannot fit, or None if nothing known rules it out."""
        config = config.normalized()
        for (knob, value), error in self._set_aside.items():
            if str(getattr(config, knob)) == value:
                return error
        host = None if self.over_host is None else self.over_host(config)
        if host is not None:
            return host
        for failed in self._failures:
            if needs_at_least_as_much_memory(config, failed):
                return (
                    f"batch_size={failed.batch_size} with num_workers={failed.num_workers} and "
                    f"amp={failed.amp} already ran out of memory, and this configuration needs "
                    "at least as much in every setting that costs memory"
                )
        return None
