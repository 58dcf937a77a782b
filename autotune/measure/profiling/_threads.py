"""The thread sweep: the step timed again on the other intra-op thread counts the space searches.

On a CPU the space may search the step's intra-op threads; after the step sweep has found which
batches fit, each other thread count times the step per precision and layout at its smaller
batches, within a share of the step budget (the step sweep leaves that share aside).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from autotune.measure.profiling._bench import (
    SampleBatches,
    StepBench,
    copied,
    is_out_of_memory,
    time_step,
)
from autotune.measure.profiling._plan import ProfilePlan
from autotune.measure.profiling._step_doubt import outpaced
from autotune.predict import StepPoint
from autotune.workload import Workload

#: Share of the step budget spent timing the step on other intra-op thread counts, where the
#: space searches them: a few batches per precision and layout, smallest first, one window
#: each, since the step's speed by batch is known from the sweep already.
THREADS_SHARE = 0.2


def thread_counts(plan: ProfilePlan, device: torch.device) -> list[int]:
    """The intra-op thread counts to time the step on: those the space searches, on a CPU,
    other than what PyTorch runs by default."""
    if device.type == "cuda":
        return []
    default = torch.get_num_threads()
    return sorted({t for t in plan.intra_op_threads if t != default})


def profile_step_threads(
    workload: Workload,
    device: torch.device,
    source: SampleBatches,
    points: Sequence[StepPoint],
    plan: ProfilePlan,
) -> list[StepPoint]:
    """The step on each of the space's other intra-op thread counts, per precision and layout
    the sweep ran, at its batches in ascending order until its share of
    :data:`THREADS_SHARE` of the step budget is spent (at least the smallest batch)."""
    counts = thread_counts(plan, device)
    ruled_out = outpaced(points)
    combos = sorted({(p.amp, p.channels_last) for p in points if p.samples_per_s} - ruled_out)
    if not counts or not combos:
        return []
    default = torch.get_num_threads()
    measured: list[StepPoint] = []
    started = time.perf_counter()
    budget_s = plan.step_budget_s * THREADS_SHARE
    todo = [(threads, combo) for threads in counts for combo in combos]
    try:
        for index, (threads, (amp, channels_last)) in enumerate(todo):
            torch.set_num_threads(threads)
            deadline = started + budget_s * (index + 1) / len(todo)
            bench = StepBench(workload, device, amp, channels_last)
            ran = sorted(
                p.batch_size
                for p in points
                if p.samples_per_s and p.amp == amp and p.channels_last == channels_last
            )
            for timed, batch_size in enumerate(ran):
                if timed and time.perf_counter() >= deadline:
                    break
                try:
                    on_device, copy_s = copied(bench, source.make(batch_size))
                    point = time_step(bench, [on_device], batch_size, deadline)
                except Exception as exc:
                    if not is_out_of_memory(exc):
                        raise
                    break
                measured.append(point.model_copy(update={"copy_s": copy_s, "threads": threads}))
    finally:
        torch.set_num_threads(default)
    return measured
