"""The optimizer probe: the step at each optimizer implementation the space searches, timed once.

The workload's own optimizer is rebuilt with ``foreach`` or ``fused``
(:func:`~autotune.measure._optimizer.with_implementation`) and its step timed at a small
batch (the workload's own) against the step with the optimizer as built, in the space's first
precision and layout, windows taken in turn, each keeping its faster (interference only slows
a step), as the compile probe does. An implementation changes the optimizer's update, which
costs the same seconds at any batch, so one timing prices it at every batch
(:class:`~autotune.predict.OptimizerPoint`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import torch

from autotune.measure.profiling._bench import StepBench, timed_steps
from autotune.measure.profiling._plan import ProfilePlan
from autotune.predict import OptimizerPoint
from autotune.workload import Workload

#: Seconds of each timed window of a step.
OPTIMIZER_WINDOW_S = 0.3
#: Windows of each implementation and of the default, taken in turn; each keeps its faster.
OPTIMIZER_WINDOWS = 2
#: Batches cycled through in the windows.
OPTIMIZER_BATCHES = 2


def optimizer_batches(plan: ProfilePlan, make: Any) -> list[Any]:
    """The host batches the probe steps on (``make(batch_size, offset)``), none where the
    plan times no implementation."""
    if not plan.optimizer_impls:
        return []
    size = plan.loader_batch_size
    return [make(size, i * size) for i in range(OPTIMIZER_BATCHES)]


def profile_optimizer(
    workload: Workload, device: torch.device, batches: Sequence[Any], plan: ProfilePlan
) -> list[OptimizerPoint]:
    """One :class:`OptimizerPoint` per implementation of the plan, in order: its step against
    the default's, each bench built anew (two models held at once, never more)."""
    if not batches:
        return []
    amp, channels_last = plan.amp_modes[0], plan.channels_last[0]
    default = StepBench(workload, device, amp, channels_last)
    default_batches = [default.on_device(b) for b in batches]
    default.step(default_batches[0])
    base: dict[str, Any] = {
        "batch_size": plan.loader_batch_size,
        "amp": amp,
        "channels_last": channels_last,
    }
    points = []
    for impl in plan.optimizer_impls:
        try:
            bench = StepBench(workload, device, amp, channels_last, optimizer_impl=impl)
            on_device = [bench.on_device(b) for b in batches]
            bench.step(on_device[0])
            bench.synchronize()
        except Exception as exc:  # one the model's parameters refuse: the trial says more
            points.append(
                OptimizerPoint(impl=impl, **base, error=f"{type(exc).__name__}: {exc}"[:300])
            )
            continue
        rate = default_rate = 0.0
        for _ in range(OPTIMIZER_WINDOWS):
            default_rate = max(default_rate, _rate(default, default_batches, base["batch_size"]))
            rate = max(rate, _rate(bench, on_device, base["batch_size"]))
        points.append(
            OptimizerPoint(
                impl=impl, **base, samples_per_s=rate, default_samples_per_s=default_rate
            )
        )
        del bench, on_device
    return points


def _rate(bench: StepBench, batches: list[Any], batch_size: int) -> float:
    """Samples/s of the median step over a :data:`OPTIMIZER_WINDOW_S` window."""
    times, _ = timed_steps(bench, batches, OPTIMIZER_WINDOW_S)
    return batch_size / statistics.median(times)
