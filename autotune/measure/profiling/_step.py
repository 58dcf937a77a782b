"""The step sweep: the training step alone, per precision and layout, by ascending batch size.

Batch sizes are tried in ascending order per precision and layout, stopping at the first
out-of-memory (on a CPU: the first batch whose predicted memory passes the budget). Each
precision and layout is swept :data:`STEP_PASSES` times and each batch keeps the faster of its
windows, since interference on a shared machine only ever slows a step down; on a CPU the later
sweeps time only the points the first casts doubt on, and a precision and layout that lost cores
for all its sweeps is timed once more after the others (the rules are in
:mod:`~autotune.measure.profiling._step_doubt`). The points also give one linear memory model
per precision and layout (:func:`memory_models`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

import torch

from autotune.measure._loop import collect_setup_garbage
from autotune.measure.profiling._bench import (
    SampleBatches,
    StepBench,
    copied,
    is_out_of_memory,
    step_batches,
    time_step,
)
from autotune.measure.profiling._plan import MEMORY_MARGIN, ProfilePlan
from autotune.measure.profiling._step_doubt import (
    doubtful,
    outpaced,
    outpaced_by,
    outpaced_on_every_core,
    short_of_cores,
)
from autotune.measure.profiling._threads import THREADS_SHARE, thread_counts
from autotune.predict import MemoryModel, StepPoint
from autotune.space import AmpMode
from autotune.workload import Workload

#: Sweeps over the batch sizes of each precision and layout; a point keeps its fastest window:
#: on a machine whose speed moves by up to 2x for seconds at a time, one sweep's curve can dip
#: by half at one batch and recover at the next (evidence: benchmarks/log/). On a CPU the later
#: sweeps time only the points the first one casts doubt on (see :func:`doubtful`).
STEP_PASSES = 2
#: Step points measured per precision/layout even past its share of the budget: the smallest
#: batches are quick, and two points are what a memory model needs.
MIN_STEP_POINTS = 2


def profile_step(
    workload: Workload,
    dataset: Any,
    device: torch.device,
    plan: ProfilePlan,
    source: SampleBatches | None = None,
) -> tuple[list[StepPoint], SampleBatches]:
    """Step points per precision/layout by ascending batch, within the step budget.

    The first sweep finds the batches that fit; the later sweeps time those again (on a CPU,
    those the first casts doubt on: see :func:`doubtful`), and each point keeps its fastest
    window (a batch a later sweep did not reach in time keeps what it has). A combination
    outpaced at its smallest batch (see
    :data:`~autotune.measure.profiling._step_doubt.OUTPACED_SHARE`) keeps that one point: no
    later sweep, no thread counts, and where it kept fewer cores busy than another, no second
    timing if it would stay outpaced with their cores (see :func:`outpaced_on_every_core`);
    else that timing stops at that batch again unless it then keeps up.
    """
    batch_sizes = sorted(plan.batch_sizes)
    source = source or step_batches(workload, dataset, plan)
    combos = [(amp, cl) for amp in plan.amp_modes for cl in plan.channels_last]
    points: list[StepPoint] = []
    bench = _started_bench(workload, device, source, batch_sizes[0], combos[0])
    collect_setup_garbage()  # the sample pool's objects: a collection due, not a step's cost
    started = time.perf_counter()
    budget_s = plan.step_budget_s * (1 - THREADS_SHARE if thread_counts(plan, device) else 1)
    for index, (amp, channels_last) in enumerate(combos):
        now = time.perf_counter()
        share = (budget_s - (now - started)) / (len(combos) - index)
        if bench is None:
            bench = StepBench(workload, device, amp, channels_last)
        swept = _sweep(
            bench,
            source,
            batch_sizes,
            now + share / STEP_PASSES,
            plan.memory_budget_bytes,
            earlier=points,
        )
        passes = 1 if (amp, channels_last) in outpaced([*points, *swept]) else STEP_PASSES
        for sweep in range(1, passes):
            deadline = now + share * (sweep + 1) / STEP_PASSES
            retime = [p.batch_size for p in doubtful(swept)]
            again = {p.batch_size: p for p in _sweep(bench, source, retime, deadline, None)}
            swept = [_faster(p, again.get(p.batch_size)) for p in swept]
        points.extend(swept)
        bench = None
    hopeless = outpaced_on_every_core(points)
    for combo in (c for c in short_of_cores(points) if c not in hopeless):
        # Timed again once, over every batch size (its sweeps may have stopped early), in its
        # place among the combinations; one still outpaced at its first batch stops there.
        bench = StepBench(workload, device, *combo)
        others = [p for p in points if (p.amp, p.channels_last) != combo]
        retimed = _sweep(
            bench,
            source,
            batch_sizes,
            time.perf_counter() + budget_s / len(combos),
            plan.memory_budget_bytes,
            earlier=others,
        )
        bench = None
        first = next(i for i, p in enumerate(points) if (p.amp, p.channels_last) == combo)
        points = [
            *others[:first],
            *_merged([p for p in points if (p.amp, p.channels_last) == combo], retimed),
            *others[first:],
        ]
    return points, source


def _started_bench(
    workload: Workload,
    device: torch.device,
    source: SampleBatches,
    batch_size: int,
    combo: tuple[AmpMode, bool],
) -> StepBench | None:
    """On CUDA, the first precision's bench after one untimed step of the smallest batch,
    before the sweep's clock starts: the context, cuBLAS's and cuDNN's handles and the
    allocator start here, not in the first precision's share of the budget, where they would
    leave it a fraction of the batches the others reach. None on other devices."""
    if device.type != "cuda":
        return None
    bench = StepBench(workload, device, *combo)
    # A step that fails here (out of memory, say) fails again in the sweep, which reports it.
    with contextlib.suppress(Exception):
        bench.step(bench.on_device(source.make(batch_size)))
        bench.synchronize()
    torch.cuda.empty_cache()
    return bench


def _sweep(
    bench: StepBench,
    source: SampleBatches,
    batch_sizes: Sequence[int],
    deadline: float,
    memory_budget: int | None,
    earlier: Sequence[StepPoint] = (),
) -> list[StepPoint]:
    """One pass over ``batch_sizes`` in ascending order; ends with an out-of-memory point where
    a batch did not fit, early when the deadline passes (after :data:`MIN_STEP_POINTS`), and
    after the first point where that ran under
    :data:`~autotune.measure.profiling._step_doubt.OUTPACED_SHARE` of a combination timed
    ``earlier`` at its batch."""
    amp, channels_last = bench.training.config.amp, bench.channels_last
    ran: list[StepPoint] = []
    for batch_size in batch_sizes:
        if time.perf_counter() >= deadline and len(ran) >= MIN_STEP_POINTS:
            break
        if bench.device.type != "cuda" and _over_budget(ran, batch_size, memory_budget):
            return [
                *ran,
                StepPoint(
                    batch_size=batch_size, amp=amp, channels_last=channels_last, out_of_memory=True
                ),
            ]
        try:
            on_device, copy_s = copied(bench, source.make(batch_size))
            batches = [on_device]
            del on_device  # held by ``batches`` alone, which ``finally`` lets go
            point = time_step(bench, batches, batch_size, deadline)
            point = point.model_copy(update={"copy_s": copy_s})
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            return [
                *ran,
                StepPoint(
                    batch_size=batch_size, amp=amp, channels_last=channels_last, out_of_memory=True
                ),
            ]
        finally:
            batches = []
            if bench.device.type == "cuda":
                torch.cuda.empty_cache()
        ran.append(point)
        if len(ran) == 1 and outpaced_by(point, earlier):
            break
    return ran


def _over_budget(points: list[StepPoint], batch_size: int, budget: int | None) -> bool:
    """Whether the memory model of the points so far puts ``batch_size`` over the budget."""
    if budget is None or not points:
        return False
    if (points[-1].peak_memory_bytes or 0) > budget:
        return True
    first = points[0]
    model = MemoryModel.fit(
        first.amp, first.channels_last, [(p.batch_size, p.peak_memory_bytes or 0) for p in points]
    )
    return model is not None and model.predict(batch_size) > MEMORY_MARGIN * budget


def _faster(first: StepPoint, again: StepPoint | None) -> StepPoint:
    """The point's faster window of two sweeps, with the larger peak memory of the two."""
    if again is None or again.samples_per_s is None:
        return first
    faster = again if (again.samples_per_s or 0.0) > (first.samples_per_s or 0.0) else first
    memory = max(first.peak_memory_bytes or 0, again.peak_memory_bytes or 0)
    return faster.model_copy(update={"peak_memory_bytes": memory or None})


def _merged(first: Sequence[StepPoint], again: Sequence[StepPoint]) -> list[StepPoint]:
    """One combination's points from two sweeps, by batch size: the faster window where both
    timed a batch, else the one that did (a batch one sweep found out of memory stays so)."""
    by_batch = {p.batch_size: p for p in first}
    for point in again:
        known = by_batch.get(point.batch_size)
        if known is None:
            by_batch[point.batch_size] = point
        elif known.out_of_memory or point.out_of_memory:
            by_batch[point.batch_size] = known if known.out_of_memory else point
        else:
            by_batch[point.batch_size] = _faster(known, point)
    return [by_batch[b] for b in sorted(by_batch)]


def memory_models(points: Sequence[StepPoint]) -> list[MemoryModel]:
    """One linear memory model per precision and layout, from the points that ran."""
    models = []
    for amp, channels_last in dict.fromkeys((p.amp, p.channels_last) for p in points):
        data = [
            (p.batch_size, p.peak_memory_bytes)
            for p in points
            if p.amp == amp
            and p.channels_last == channels_last
            and p.peak_memory_bytes is not None
            and not p.out_of_memory
        ]
        model = MemoryModel.fit(amp, channels_last, [(b, m) for b, m in data if m is not None])
        if model is not None:
            models.append(model)
    return models
