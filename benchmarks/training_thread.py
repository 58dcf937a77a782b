"""``python -m benchmarks.training_thread``: where a trial's time goes beside what the profile
times alone, for the predictor.

For a few configurations of one workload, in one process: the step alone on one batch already
on the device (timed per step with a synchronisation, and back to back), with the training
thread's CPU seconds per step (on CUDA these include the spinning of a thread that waits for
the device, so they bound the host's own work from above); one copy of the batch to the
device; the loader alone, as the profile times it; the loader's batches pulled in lockstep with
the step (no copy); and the measured window of a real trial loop. Written for the GPU sessions
recorded in benchmarks/log/gpu.md (the first figures there came from a first form of this code
on an NVIDIA H200, 2026-11-26). One JSON line per configuration.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any, cast, get_args

import torch

from autotune.measure._batches import to_device
from autotune.measure._loop import MeasurePlan, build_loader
from autotune.measure._measure import measure
from autotune.measure._step import TrainingStep, apply_backend_flags, forward_loss
from autotune.measure.profiling._loader import _measure_loader
from autotune.space import AmpMode, Config
from autotune.workload import Workload, load_workload

#: Configurations by device type: (batch, workers, precision, channels_last, pinned memory).
CONFIGS: dict[str, list[tuple[int, int, AmpMode, bool, bool]]] = {
    "cuda": [
        (128, 8, "off", False, False),
        (128, 8, "off", False, True),
        (256, 8, "fp16", True, False),
        (256, 16, "fp16", True, False),
    ],
    "cpu": [(32, 1, "off", False, False), (64, 2, "off", False, False)],
}


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(
    step: Callable[[], None],
    device: torch.device,
    seconds: float,
    batch: int,
    synchronize_each: bool,
) -> dict[str, float]:
    times: list[float] = []
    cpu_before, started = time.thread_time(), time.perf_counter()
    while time.perf_counter() - started < seconds:
        begun = time.perf_counter()
        step()
        if synchronize_each:
            _synchronize(device)
        times.append(time.perf_counter() - begun)
    _synchronize(device)
    wall = time.perf_counter() - started
    return {
        "ms_median": 1e3 * statistics.median(times),
        "samples_per_s": batch * len(times) / wall,
        "thread_cpu_ms_per_step": 1e3 * (time.thread_time() - cpu_before) / len(times),
    }


def _lockstep(
    workload: Workload,
    config: Config,
    dataset: Any,
    step: Callable[[], None],
    device: torch.device,
    seconds: float,
) -> dict[str, float]:
    """The loader's batches pulled (not copied) one per step of the fixed device batch."""
    loader = build_loader(workload, config, dataset)
    batches: Iterator[Any] = iter(loader)

    def pull() -> None:
        nonlocal batches
        try:
            next(batches)
        except StopIteration:
            batches = iter(loader)
            next(batches)

    for _ in range(max(1, config.num_workers) + 1):
        pull()
    waited, steps = 0.0, 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        begun = time.perf_counter()
        pull()
        waited += time.perf_counter() - begun
        step()
        steps += 1
    _synchronize(device)
    wall = time.perf_counter() - started
    del batches
    return {"samples_per_s": config.batch_size * steps / wall, "data_wait": waited / wall}


def one_config(
    workload: Workload, dataset: Any, config: Config, device: torch.device, seconds: float
) -> dict[str, Any]:
    training = TrainingStep(config, device)
    apply_backend_flags(config, device)
    model = training.prepare_model(workload.model()).train()
    optimizer = workload.optimizer(model.parameters())
    single = config.model_copy(
        update={"num_workers": 0, "prefetch_factor": None, "persistent_workers": False}
    )
    host_batch = next(iter(build_loader(workload, single, dataset)))
    device_batch = to_device(host_batch, device, config.channels_last, False)

    def step() -> None:
        with training.autocast():
            loss = forward_loss(workload, model, device_batch)
        training.backward(loss, optimizer)

    for _ in range(10):
        step()
    _synchronize(device)
    row: dict[str, Any] = {
        "config": config.model_dump(
            include={"batch_size", "num_workers", "amp", "channels_last", "pin_memory"}
        )
    }
    row["step_synchronised"] = _timed(step, device, seconds, config.batch_size, True)
    row["step_back_to_back"] = _timed(step, device, seconds, config.batch_size, False)
    _synchronize(device)
    started = time.perf_counter()
    to_device(host_batch, device, config.channels_last, False)
    _synchronize(device)
    row["copy_ms"] = 1e3 * (time.perf_counter() - started)
    row["lockstep"] = _lockstep(workload, config, dataset, step, device, seconds)
    try:
        point = _measure_loader(workload, dataset, config.batch_size, config.num_workers)
        row["loader_alone"] = {
            "samples_per_s": point.samples_per_s,
            "cores_busy": point.samples_per_s * point.cpu_s_per_sample,
            "receive_ms": 1e3 * (point.main_cpu_s_per_batch or 0.0),
        }
    except RuntimeError as error:  # an epoch too short for that many workers' warm-up
        row["loader_alone"] = {"error": str(error)}
    window = measure(workload, config, device, MeasurePlan(min_seconds=seconds))
    row["trial"] = {
        key: value
        for key, value in window.as_dict().items()
        if key
        in ("samples_per_s", "step_time_median_ms", "data_wait_fraction", "copy_wait_fraction")
    }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--workload", default="builtin:image-cnn")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument(
        "--config",
        action="append",
        type=_config_option,
        default=None,
        metavar="BATCH:WORKERS:AMP",
        help="a configuration to time instead of the device's defaults, e.g. "
        "256:0:bf16 (repeatable)",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="times through the configurations, interleaved"
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    workload = load_workload(args.workload)
    dataset = workload.dataset()
    print(
        json.dumps({"cpus": os.cpu_count(), "device": args.device, "workload": args.workload}),
        flush=True,
    )
    configs = args.config or CONFIGS[device.type]
    for _ in range(args.rounds):
        for batch, workers, amp, channels_last, pinned in configs:
            config = Config(
                batch_size=batch,
                num_workers=workers,
                amp=amp,
                channels_last=channels_last,
                pin_memory=pinned,
                persistent_workers=workers > 0,
                prefetch_factor=2 if workers else None,
            )
            print(
                json.dumps(one_config(workload, dataset, config, device, args.seconds)), flush=True
            )


def _config_option(text: str) -> tuple[int, int, AmpMode, bool, bool]:
    """``--config BATCH:WORKERS:AMP`` as a row of :data:`CONFIGS` (no channels_last or
    pinning)."""
    try:
        batch, workers, amp = text.split(":")
        if amp not in get_args(AmpMode):
            raise ValueError(amp)
        return int(batch), int(workers), cast(AmpMode, amp), False, False
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not BATCH:WORKERS:AMP; write it like 256:0:bf16 (AMP one of "
            f"{', '.join(get_args(AmpMode))})"
        ) from None


if __name__ == "__main__":
    main()
