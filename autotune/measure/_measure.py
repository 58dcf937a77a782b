"""One configuration's measurement inside its trial: set up, compile, warm up, time a window.

Each stage has its module: the loop (:mod:`autotune.measure._loop`), the warm-up
(:mod:`autotune.measure._warmup`), the timed window (:mod:`autotune.measure._window`) and the
epoch start's amortisation (:mod:`autotune.measure._epoch_start`); this module runs them in
order and turns what they saw into :class:`WindowMetrics`.
"""

from __future__ import annotations

import contextlib
import statistics
from dataclasses import asdict, dataclass
from typing import Any

import torch

from autotune.measure._compile import fresh_compile_caches
from autotune.measure._epoch_start import Amortised, amortise_epoch_start
from autotune.measure._loop import MeasurePlan, ProgressSink, TrainingLoop, collect_setup_garbage
from autotune.measure._warmup import compile_phase, warm_up
from autotune.measure._window import WindowRecord, time_window
from autotune.space import Config
from autotune.workload import Workload


@dataclass
class WindowMetrics:
    """What a trial's timed window measured, as the trial's record stores it."""

    #: Samples per second over the window, with the epoch restart cost amortised over an epoch.
    samples_per_s: float
    #: Step time: on CUDA the device's (CUDA events around each step), elsewhere the host's.
    step_time_median_ms: float
    step_time_p90_ms: float
    #: Share of the window spent inside the DataLoader's ``next()``, nothing else.
    data_wait_fraction: float
    #: Share of the window the host spent copying batches to the device (on CUDA, including
    #: any wait for the device that a pageable copy implies); 0 on a CPU.
    copy_wait_fraction: float
    steps: int
    warmup_steps: int
    window_s: float
    #: Seconds to get the first batch of a new epoch beyond a normal batch's wait (worker
    #: start-up when ``persistent_workers`` is off), and the epoch length it is amortised over.
    epoch_restart_s: float | None
    steps_per_epoch: int | None
    losses_finite: bool
    peak_memory_allocated_bytes: int | None
    peak_memory_reserved_bytes: int | None
    #: Seconds ``torch.compile`` added to the steps that compiled, beyond an ordinary step;
    #: None when the configuration does not compile. Not part of ``samples_per_s``.
    compile_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure(
    workload: Workload,
    config: Config,
    device: torch.device,
    plan: MeasurePlan,
    progress: ProgressSink | None = None,
) -> WindowMetrics:
    """Train ``workload`` with ``config`` and time a steady-state window.

    A configuration that compiles first steps until compilation is done (timed apart, as
    ``compile_s``), with inductor's caches empty, as on a user's first run.
    Raises :class:`NonFiniteLoss` when a loss was NaN/inf, and
    :class:`~autotune.measure.UnsuitedValue` when the step cannot run under the CUDA graphs
    its compile mode records; errors from the workload propagate.
    """
    compiles = config.compile != "off"
    with fresh_compile_caches() if compiles else contextlib.nullcontext():
        loop = _set_up(workload, config, device, plan)
        with loop.graphs.failures_explained():  # CUDA graphs that break the step say so
            compiling = compile_phase(loop, progress) if compiles else None
            warmup_steps = warm_up(loop, plan, progress)
            window = time_window(loop, plan, progress)
            amortised = amortise_epoch_start(loop, window)
        return _window_metrics(loop, window, amortised, warmup_steps, compiling)


def _set_up(
    workload: Workload, config: Config, device: torch.device, plan: MeasurePlan
) -> TrainingLoop:
    """Seed, reset CUDA's peak memory, build the loop, and run the garbage collection that
    building it left due (see :func:`collect_setup_garbage`)."""
    torch.manual_seed(plan.seed)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    loop = TrainingLoop(workload, config, device)
    collect_setup_garbage()
    return loop


def _window_metrics(
    loop: TrainingLoop,
    window: WindowRecord,
    amortised: Amortised,
    warmup_steps: int,
    compiling: tuple[int, float] | None,
) -> WindowMetrics:
    """The metrics of a window, read after the epoch start's amortisation (whose extra steps
    count towards the peak memory, as a run's epochs do)."""
    device = loop.device
    step_times = window.device_steps_s or window.host_steps_s
    cuda = device.type == "cuda"
    return WindowMetrics(
        samples_per_s=window.samples / amortised.seconds,
        step_time_median_ms=statistics.median(step_times) * 1000,
        step_time_p90_ms=_percentile(step_times, 0.9) * 1000,
        data_wait_fraction=min(1.0, amortised.waited_s / amortised.seconds),
        copy_wait_fraction=min(1.0, window.copy_wait_s / window.seconds),
        steps=window.steps,
        warmup_steps=warmup_steps,
        window_s=window.seconds,
        epoch_restart_s=amortised.epoch_restart_s,
        steps_per_epoch=loop.steps_per_epoch,
        losses_finite=True,
        peak_memory_allocated_bytes=int(torch.cuda.max_memory_allocated(device)) if cuda else None,
        peak_memory_reserved_bytes=int(torch.cuda.max_memory_reserved(device)) if cuda else None,
        compile_s=None if compiling is None else _compile_s(compiling, window),
    )


def _compile_s(compiling: tuple[int, float], window: WindowRecord) -> float:
    """Seconds the compiling steps took beyond as many ordinary steps' work: the device's time
    on CUDA, else the host's less the wait for data."""
    ordinary = window.device_steps_s or [
        host - wait for host, wait in zip(window.host_steps_s, window.waits_s, strict=True)
    ]
    compile_steps, compile_wall = compiling
    return max(0.0, compile_wall - compile_steps * statistics.median(ordinary))


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]
