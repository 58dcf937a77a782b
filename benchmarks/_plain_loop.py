"""The benchmark's own training loop, independent of autotune's ``TrainingLoop``.

Run as ``python -m benchmarks._plain_loop`` with a JSON request on stdin; prints one JSON line.
It takes only the workload's factories from autotune (the user's code) and writes the rest
the way a user would: a ``DataLoader``, the model, the optimizer and ``time.perf_counter``. On
CUDA it copies each batch to the GPU (without blocking when memory is pinned), sets
``cudnn.benchmark`` as configured, and synchronizes the GPU before reading the clock at each end
of the timed window, so the window holds the GPU's work, not only the host's dispatch of it.

Two modes:

- ``loader``: batches come from a DataLoader built with the configuration's settings.
- ``memory``: a few batches are built once before timing and cycled, already on the device,
  with no loader at all: the throughput the model alone allows (section 5's limit).

The ``loader`` mode times what a training run sees: whole epochs, each starting its loader
iterator as a run does (worker start-up included when workers are not persistent), after one
whole epoch of warm-up, and as many epochs as it takes to pass ``min_steps`` steps and
``min_seconds`` seconds. autotune's runner times a shorter window and amortises the epoch start
it measures over the epoch's length; this loop is the reference it must agree with. The
``memory`` mode has no epochs: warm-up steps, then the plan's window.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import itertools
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from autotune.workload import load_workload

#: Distinct batches kept in memory for the ``memory`` mode; values do not change speed.
_MEMORY_BATCHES = 4

#: Settings this loop does not write, with the value it runs as: the suite's reduced space
#: holds each at that value, so the tuner's picks never need them.
_NOT_WRITTEN = {"device_prefetch": False, "tf32": None, "compile": "off", "grad_accum_steps": 1}


def _refuse_unwritten(config: dict[str, Any]) -> None:
    unwritten = [
        f"{name}={config[name]}" for name, value in _NOT_WRITTEN.items() if config[name] != value
    ]
    if config["amp"] == "fp16":
        unwritten.append("amp=fp16 (it would need a GradScaler)")
    if unwritten:
        raise SystemExit(
            f"the plain loop does not write {', '.join(unwritten)}; compare it "
            "on a configuration without them"
        )


def _retain_freed_memory() -> None:
    """What a user's script does for ``retain_freed_memory``: glibc's mallopt(3), by hand."""
    libc = ctypes.CDLL(None)
    m_trim_threshold, m_mmap_threshold = -1, -3
    if not (
        libc.mallopt(m_mmap_threshold, 1 << 30) and libc.mallopt(m_trim_threshold, (1 << 31) - 1)
    ):
        raise SystemExit("glibc refused the thresholds of retain_freed_memory")


def _loader(workload: Any, config: dict[str, Any]) -> DataLoader[Any]:
    extra: dict[str, Any] = {}
    if config["num_workers"] > 0:
        extra["persistent_workers"] = config["persistent_workers"]
        if config["prefetch_factor"] is not None:
            extra["prefetch_factor"] = config["prefetch_factor"]
    return DataLoader(
        workload.dataset(),
        batch_size=config["batch_size"],
        shuffle=True,
        drop_last=True,
        num_workers=config["num_workers"],
        pin_memory=config["pin_memory"],
        collate_fn=workload.collate_fn,
        **extra,
    )


def _endless(loader: DataLoader[Any]) -> Iterator[Any]:
    while True:
        yield from loader


def _prepare(
    batch: Any, device: torch.device, non_blocking: bool, channels_last: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch on the device (a no-op on a CPU), channels_last if chosen."""
    inputs = batch[0].to(device, non_blocking=non_blocking)
    target = batch[1].to(device, non_blocking=non_blocking)
    if channels_last and inputs.dim() == 4:
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    return inputs, target


def main() -> None:
    request = json.loads(sys.stdin.read())
    config, plan, mode = request["config"], request["plan"], request["mode"]
    device = torch.device(request.get("device", "cpu"))
    _refuse_unwritten(config)
    if config.get("retain_freed_memory"):
        _retain_freed_memory()
    if config.get("intra_op_threads") is not None:
        torch.set_num_threads(config["intra_op_threads"])
    torch.manual_seed(plan.get("seed", 0))
    workload = load_workload(request["workload"])
    loss_fn = workload.loss
    if loss_fn is None:
        raise SystemExit("the plain loop times workloads with a loss function (the built-ins)")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = config["cudnn_benchmark"]
    model = workload.model().to(device)
    if config["channels_last"]:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    model.train()
    optimizer = workload.optimizer(model.parameters())
    loader = _loader(workload, config)
    non_blocking = config["pin_memory"] and device.type == "cuda"
    if mode == "memory":
        kept = [
            _prepare(b, device, False, config["channels_last"])
            for b in itertools.islice(_endless(loader), _MEMORY_BATCHES)
        ]
        del loader  # no loader, no workers while timing
        batches: Iterator[Any] = itertools.cycle(kept)
    else:
        batches = (
            _prepare(b, device, non_blocking, config["channels_last"]) for b in _endless(loader)
        )
    dtype = {"off": None, "bf16": torch.bfloat16}[config["amp"]]

    def step() -> int:
        inputs, target = next(batches)
        if workload.device_transform is not None:
            inputs = workload.device_transform(inputs)
        autocast = (
            torch.autocast(device.type, dtype=dtype)
            if dtype is not None
            else contextlib.nullcontext()
        )
        with autocast:
            loss = loss_fn(model(inputs), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return int(inputs.shape[0])

    def clock() -> float:
        """The time once the device has finished the work queued so far."""
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    if mode == "memory":
        for _ in range(max(plan["warmup_steps"], config["num_workers"] + 1)):
            step()
    else:
        for _ in range(len(loader)):  # one whole epoch of warm-up
            step()
    # The full collection that building the model and loader left due is a start-up cost (a
    # long run pays it once); autotune's runner runs it before its warm-up. Here it falls at an
    # epoch's end, when the workers have no batch left to read: none is queued during it.
    gc.collect()
    samples, steps = 0, 0
    faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = clock()
    while True:
        samples += step()
        steps += 1
        # The host's clock decides when to stop; the window's end waits for the device.
        whole_epochs = mode == "memory" or steps % len(loader) == 0
        if (
            whole_epochs
            and steps >= plan["min_steps"]
            and time.perf_counter() - start >= plan["min_seconds"]
        ):
            break
    elapsed = clock() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "outcome": "ok",
                "samples_per_s": samples / elapsed,
                "window_s": elapsed,
                "steps": steps,
                "minor_faults_per_step": (usage.ru_minflt - faults_before) / steps,
                "peak_rss_bytes": usage.ru_maxrss * 1024,
            }
        ),
        flush=True,
    )
    os._exit(0)  # do not wait on loader workers at teardown; the parent kills the group


if __name__ == "__main__":
    main()
