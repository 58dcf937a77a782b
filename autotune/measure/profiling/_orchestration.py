"""The profile's order of work: each part in turn, inside one trial process, into one Profile.

:func:`profile` sets the heap up as the plan asks, reads the sample pool once, then runs the
fresh-heap probe, the step sweep, the thread sweep, the fork, accumulation and optimizer
probes, the loader sweep and its follow-ups, and last the compile probe, and assembles what
they measured into the predictor's :class:`~autotune.predict.Profile`. It owns no measurement
of its own.

In a job of several ranks it runs in rank 0 of the profile's ranks, the step sweep, the
thread sweep, the optimizer probe and the loader sweep in :func:`._lockstep.lockstep` with
the other ranks (which run :func:`._follow.follow`); what it records is one rank's
(:attr:`~autotune.predict.Profile.ranks`).
"""

from __future__ import annotations

import dataclasses
import os
import time

import torch

from autotune.measure._distributed import world_size
from autotune.measure._host_allocator import glibc_malloc, retain_freed_memory
from autotune.measure._loop import collect_setup_garbage
from autotune.measure.profiling._accumulation import profile_accumulation
from autotune.measure.profiling._bench import step_batches
from autotune.measure.profiling._compile import compile_batches, profile_compile
from autotune.measure.profiling._host import profile_fork_copy, profile_fresh_heap
from autotune.measure.profiling._loader import (
    epoch_length,
    extended_workers,
    profile_loader,
    worker_memory,
)
from autotune.measure.profiling._loader_followup import profile_large_batch, profile_prefetch
from autotune.measure.profiling._lockstep import lockstep, stop_conducting
from autotune.measure.profiling._optimizer import optimizer_batches, profile_optimizer
from autotune.measure.profiling._plan import ProfilePlan
from autotune.measure.profiling._step import memory_models, profile_step
from autotune.measure.profiling._threads import profile_step_threads
from autotune.predict import HeapPoint, Profile
from autotune.workload import Workload


def profile(workload: Workload, device: torch.device, plan: ProfilePlan) -> Profile:
    """Measure the step alone and the loader alone (see :mod:`autotune.measure.profiling`)."""
    started = time.perf_counter()
    budget_s = plan.step_budget_s + plan.loader_budget_s
    fresh_heap = plan.fresh_heap and device.type == "cpu" and glibc_malloc()
    if plan.retain_freed_memory and not fresh_heap:
        retain_freed_memory()
    torch.manual_seed(0)
    dataset = workload.dataset()
    ranks = world_size()
    # One rank's share of the host (--host-share): the ranks of a profile share their cores.
    cpu_count = max(1, len(os.sched_getaffinity(0)) // ranks)
    source = step_batches(workload, dataset, plan)
    heap: list[HeapPoint] = []
    if fresh_heap:
        collect_setup_garbage()
        heap_started = time.perf_counter()
        heap = profile_fresh_heap(workload, device, source, plan)
        # Its seconds come out of the step's budget: the profile keeps to --profile-seconds.
        plan = dataclasses.replace(
            plan, step_budget_s=max(0.0, plan.step_budget_s - (time.perf_counter() - heap_started))
        )
        retain_freed_memory()  # set already unless the step ran out of memory
    with lockstep():  # on every rank, the gradients all-reduced in each timed step
        step, source = profile_step(workload, dataset, device, plan, source)
        step_threads = profile_step_threads(workload, device, source, step, plan)
    fork_copy = (
        profile_fork_copy(workload, device, source, plan)
        if plan.fork_copy and device.type == "cpu"
        else None
    )
    accumulation = (
        profile_accumulation(workload, device, source, plan) if plan.accumulation else None
    )
    with lockstep():
        optimizer = profile_optimizer(workload, device, optimizer_batches(plan, source.make), plan)
    collate = source.collate_seconds(plan.loader_batch_size)
    sample_bytes = source.sample_bytes()
    compiling = compile_batches(plan, source.make)
    del source
    collect_setup_garbage()  # else a worker forked while a collection was due runs it
    with lockstep():  # a loader on every rank at once, each on its shard
        loader = profile_loader(workload, dataset, plan, cpu_count)
        large = profile_large_batch(workload, dataset, plan, loader, sample_bytes)
        counts = [p.num_workers for p in loader if p.num_workers]
        fewest = (
            large
            if large and counts and large[1].num_workers == min(counts)
            else profile_large_batch(workload, dataset, plan, loader, sample_bytes, fewest=True)
        )
        ahead = profile_prefetch(workload, dataset, plan, loader, sample_bytes)
    stop_conducting()  # the other ranks are done: the compile probe is rank 0's alone
    # Last: a compile leaves inductor's workers and caches behind, which no sweep should share.
    compiled = profile_compile(workload, device, compiling, plan, step)
    grid_max = max(plan.worker_counts)
    return Profile(
        device_type=device.type,
        cpu_count=cpu_count,
        ranks=ranks,
        step=step,
        step_threads=step_threads,
        default_threads=torch.get_num_threads() if device.type != "cuda" else None,
        loader=loader,
        memory=memory_models(step),
        loader_batch_size=plan.loader_batch_size,
        loader_large_batch_size=large[0] if large else None,
        loader_large_batch=large[1] if large else None,
        loader_fewest_workers_batch_size=fewest[0] if fewest else None,
        loader_fewest_workers=fewest[1] if fewest else None,
        loader_one_ahead=ahead[0] if ahead else None,
        loader_prefetch=ahead[1] if ahead else None,
        dataset_length=epoch_length(dataset),
        collate_s_per_batch=collate,
        sample_bytes=sample_bytes,
        worker_memory_bytes=worker_memory(loader),
        extra_workers=extended_workers(loader, grid_max),
        grid_max_workers=grid_max,
        retained_freed_memory=plan.retain_freed_memory or fresh_heap,
        fresh_heap=heap,
        fork_copy=fork_copy,
        accumulation=accumulation,
        compile=compiled,
        optimizer=optimizer,
        duration_s=time.perf_counter() - started,
        budget_s=budget_s,
    )
