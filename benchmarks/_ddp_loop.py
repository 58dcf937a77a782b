"""An independent DDP training loop that applies a recommendation, launched by ``torchrun``.

``torchrun --standalone --nproc-per-node N -m benchmarks._ddp_loop WORKLOAD RECOMMENDATION.json``
runs what a user's DDP script does with autotune's answer, written by hand from the JSON's
``config`` and ``exports`` (not autotune's ``TrainingLoop``): the process group from torchrun's
environment, the model in ``DistributedDataParallel``, a ``DistributedSampler``, the
DataLoader built from ``exports["dataloader"]``, the optimizer rebuilt with
``exports["optimizer"]``, bf16 autocast, accumulation with ``no_sync``, channels_last and
glibc's thresholds as set. It times whole epochs after one of warm-up, as
``benchmarks._plain_loop`` does, and rank 0 prints one JSON line: the global samples per second
(every rank's samples over the slowest rank's window).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from autotune.workload import load_workload
from benchmarks._plain_loop import _retain_freed_memory

#: Settings this loop does not write on a CPU; the benchmark tunes with them fixed.
_NOT_WRITTEN = {"compile": "off", "device_prefetch": False}


def main() -> None:
    workload_ref, path = sys.argv[1], sys.argv[2]
    min_seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 6.0
    with open(path) as recommendation:
        document = json.load(recommendation)
    config: dict[str, Any] = document["config"]
    exports: dict[str, Any] = document["exports"]
    unwritten = [f"{k}={config[k]}" for k, v in _NOT_WRITTEN.items() if config[k] != v]
    if unwritten:
        raise SystemExit(f"the DDP loop does not write {', '.join(unwritten)}")
    if config["retain_freed_memory"]:
        _retain_freed_memory()
    if config["intra_op_threads"] is not None:
        torch.set_num_threads(config["intra_op_threads"])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    workload = load_workload(workload_ref)
    loss_fn = workload.loss
    if loss_fn is None:
        raise SystemExit("the DDP loop times workloads with a loss function (the built-ins)")
    model = workload.model()
    if config["channels_last"]:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    model.train()
    model = DistributedDataParallel(model)
    optimizer = workload.optimizer(model.parameters())
    if exports.get("optimizer"):
        optimizer = type(optimizer)(
            model.parameters(), **(optimizer.defaults | exports["optimizer"])
        )
    dataset = workload.dataset()
    sampler: DistributedSampler[Any] = DistributedSampler(dataset, shuffle=True, drop_last=True)
    loader = DataLoader(
        dataset,
        sampler=sampler,
        drop_last=True,
        collate_fn=workload.collate_fn,
        **exports["dataloader"],
    )
    dtype = torch.bfloat16 if config["amp"] == "bf16" else None
    accumulate = config["grad_accum_steps"]
    micro = 0

    def step(batch: Any) -> int:
        nonlocal micro
        inputs, target = batch[0], batch[1]
        if workload.device_transform is not None:
            inputs = workload.device_transform(inputs)
        if config["channels_last"] and inputs.dim() == 4:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        micro += 1
        last = micro % accumulate == 0
        autocast = (
            torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()
        )
        # Gradients are all-reduced on the micro-step that steps the optimizer only.
        with contextlib.nullcontext() if last else model.no_sync():
            with autocast:
                loss = loss_fn(model(inputs), target) / accumulate
            loss.backward()
        if last:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return int(inputs.shape[0])

    epoch = 0

    def run_epoch() -> tuple[int, int]:
        nonlocal epoch
        sampler.set_epoch(epoch)
        epoch += 1
        samples = steps = 0
        for batch in loader:
            samples += step(batch)
            steps += 1
        return samples, steps

    run_epoch()  # warm-up: workers start, the allocator settles
    samples = steps = 0
    start = time.perf_counter()
    while True:
        done, taken = run_epoch()
        samples, steps = samples + done, steps + taken
        # Every rank stops after the same epoch: rank 0's clock decides.
        stop = torch.tensor([int(time.perf_counter() - start >= min_seconds)])
        dist.broadcast(stop, src=0)
        if stop.item():
            break
    elapsed = time.perf_counter() - start
    totals = torch.tensor([float(samples), elapsed])
    gathered = [torch.zeros(2) for _ in range(world)]
    dist.all_gather(gathered, totals)
    if rank == 0:
        global_samples = sum(float(t[0]) for t in gathered)
        slowest = max(float(t[1]) for t in gathered)
        print(
            json.dumps(
                {
                    "samples_per_s": global_samples / slowest,
                    "ranks": world,
                    "steps": steps,
                    "window_s": slowest,
                }
            ),
            flush=True,
        )
    dist.destroy_process_group()
    os._exit(0)  # do not wait on loader workers at teardown


if __name__ == "__main__":
    main()
