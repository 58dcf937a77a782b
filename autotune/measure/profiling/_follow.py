"""The ranks other than 0 in a profile of several: each runs what rank 0 announces (see
:mod:`autotune.measure.profiling._lockstep`) until it says to stop.

A bench is built as rank 0 built its (its model wrapped in DDP, on rank 0's intra-op
threads); a step is taken on a batch of the size rank 0 stepped, collated once per size from
the rank's own pool of samples (the first step at a size is rank 0's untimed warm-up); a
loader is built as rank 0's, on the rank's shard, and its batches pulled until rank 0's next
word, whose broadcast is waited on beside them.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

import torch
import torch.distributed as dist

from autotune.measure._loop import build_loader, collect_setup_garbage
from autotune.measure.profiling._bench import StepBench, is_out_of_memory, step_batches
from autotune.measure.profiling._lockstep import (
    AMP_MODES,
    ARGS,
    BENCH,
    COMPILE_MODES,
    END,
    IDLE,
    LOADER,
    OPTIMIZER_IMPLS,
    STEP,
    WIDTH,
    control_group,
    set_following,
)
from autotune.measure.profiling._plan import ProfilePlan
from autotune.space import Config
from autotune.workload import Workload

_EPOCH_END = object()


def follow(workload: Workload, device: torch.device, plan: ProfilePlan) -> None:
    """Run rank 0's benches, steps and loaders on this rank until it sends the end."""
    set_following()
    group = control_group()  # with rank 0's conductor's, collectively
    dataset = workload.dataset()
    source = step_batches(workload, dataset, plan)
    benches: dict[int, StepBench] = {}
    batches: dict[int, tuple[int, Any]] = {}
    command = torch.zeros(WIDTH, dtype=torch.int64)
    received = False  # the next command came in beside a loader already
    while True:
        if not received:
            dist.broadcast(command, 0, group=group)
        received = False
        values = [int(v) for v in command.tolist()]
        code, args = values[0], values[1 : 1 + ARGS]
        for dropped in values[1 + ARGS :]:
            benches.pop(dropped, None)
            batches.pop(dropped, None)
        if code == END:
            return
        # A bench or a step that fails here fails on rank 0 alike (an optimizer the model's
        # parameters refuse, a batch out of memory), which goes on past it: so does this rank.
        if code == BENCH:
            ident, amp, channels_last, compile_mode, impl, threads = args
            torch.set_num_threads(max(1, threads))
            try:
                benches[ident] = StepBench(
                    workload,
                    device,
                    AMP_MODES[amp],
                    bool(channels_last),
                    COMPILE_MODES[compile_mode],
                    OPTIMIZER_IMPLS[impl],
                )
            except Exception:
                traceback.print_exc()
        elif code == STEP:
            ident, size = args[0], args[1]
            try:
                bench = benches[ident]
                held = batches.get(ident)
                if held is None or held[0] != size:
                    batches.pop(ident, None)
                    held = batches[ident] = (size, bench.on_device(source.make(size)))
                bench.step(held[1])
            except Exception as exc:
                traceback.print_exc()
                batches.pop(ident, None)
                if device.type == "cuda" and is_out_of_memory(exc):
                    torch.cuda.empty_cache()
        elif code == LOADER:
            _pull(workload, dataset, args[0], args[1], args[2], command, group)
            received = True
        elif code == IDLE:
            benches.clear()
            batches.clear()
            collect_setup_garbage()
            if device.type == "cuda":
                torch.cuda.empty_cache()
            dist.barrier(group=group)


def _pull(
    workload: Workload,
    dataset: Any,
    batch_size: int,
    workers: int,
    prefetch_factor: int,
    command: torch.Tensor,
    group: Any,
) -> None:
    """Pull batches of the loader rank 0 times, until its next command fills ``command``."""
    config = Config(
        batch_size=batch_size,
        num_workers=workers,
        prefetch_factor=prefetch_factor if workers else None,
    )
    loader = build_loader(workload, config, dataset)
    word = dist.broadcast(command, 0, group=group, async_op=True)
    iterator = iter(loader)
    try:
        while not word.is_completed():
            if next(iterator, _EPOCH_END) is _EPOCH_END:
                iterator = iter(loader)  # an epoch ends before rank 0's window does
                time.sleep(0.001)  # an empty shard spins no core
    finally:
        del iterator
    word.wait()
