"""The accumulation probe: what accumulating gradients over micro-batches saves and costs a step.

Where the space holds configurations that accumulate gradients, the optimizer step (which
accumulating runs once per several micro-batches) and the extra cost of a backward adding into
kept gradients are timed alone, so the predictor can price accumulation without a trial.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from autotune.measure._step import forward_loss
from autotune.measure.profiling._bench import SampleBatches, StepBench, is_out_of_memory
from autotune.measure.profiling._plan import ProfilePlan
from autotune.predict import AccumulationPoint
from autotune.workload import Workload

#: Rounds :func:`profile_accumulation` times (the medians count: each part a few milliseconds,
#: timed alone, where one preempted round would skew a mean).
ACCUMULATION_REPEATS = 9


def profile_accumulation(
    workload: Workload, device: torch.device, source: SampleBatches, plan: ProfilePlan
) -> AccumulationPoint | None:
    """What accumulating gradients saves and costs a step (see :class:`AccumulationPoint`),
    at the plan's smallest batch in its first precision and layout (the optimizer's work and
    the gradients' size depend on the parameters, not the batch). Each of
    :data:`ACCUMULATION_REPEATS` rounds times a backward writing the gradients afresh, one
    adding into them, then the optimizer step with zeroing them, on CUDA synchronised; the
    medians of the step and of each round's difference between the two backwards count.
    Without a GradScaler's unscaling, which fp16 adds. None where the step ran out of
    memory."""
    batch_size = min(plan.batch_sizes)
    amp, channels_last = plan.amp_modes[0], plan.channels_last[0]

    def timed(work: Callable[[], object]) -> float:
        bench.synchronize()
        started = time.perf_counter()
        work()
        bench.synchronize()
        return time.perf_counter() - started

    def backward() -> float:
        with bench.training.autocast():
            loss = forward_loss(workload, bench.model, batch)
        return timed(loss.backward)

    def optimizer_step() -> None:
        bench.optimizer.step()
        bench.optimizer.zero_grad(set_to_none=True)

    optimizer_s, accumulate_s = [], []
    try:
        bench = StepBench(workload, device, amp, channels_last)
        batch = bench.on_device(source.make(batch_size))
        bench.step(batch)  # the optimizer's state exists from here on, as in a trial
        for _ in range(ACCUMULATION_REPEATS):
            fresh = backward()
            accumulate_s.append(backward() - fresh)
            optimizer_s.append(timed(optimizer_step))
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        return None
    return AccumulationPoint(
        amp=amp,
        batch_size=batch_size,
        optimizer_s=statistics.median(optimizer_s),
        accumulate_s=max(0.0, statistics.median(accumulate_s)),
    )
