"""The trial process: ``python -m autotune.runner._child`` reads a request on stdin, or the
fork server forks it with the request in hand (:func:`run_forked`).

A request probes the workload (what can be searched), profiles it (the step alone and the
loader alone) or measures one configuration.
Every outcome the process can still report (ok, oom, nonfinite, error) is written as a
``result`` event; a crash or a hang is classified by the parent.
"""

from __future__ import annotations

import ctypes
import faulthandler
import json
import os
import signal
import sys
import traceback
from typing import Any, NoReturn

import psutil
import torch

from autotune.errors import AutotuneError, ConfigError
from autotune.measure import (
    MeasurePlan,
    NonFiniteLoss,
    ProfilePlan,
    compile_unavailable,
    device_info,
    fingerprint,
    input_batch_ndim,
    measure,
    peak_proportional_bytes,
    resolve_device,
)
from autotune.measure import profile as profile_workload
from autotune.runner._protocol import RESULT_FD_ENV, EventWriter
from autotune.space import Config, WorkloadInfo
from autotune.workload import Workload, load_workload

_OOM_PHRASES = ("out of memory", "can't allocate memory", "cannot allocate memory")


def describe_exception(exc: BaseException) -> str:
    """The exception in the workload's own words: its type and message, one line.

    An error raised in a DataLoader worker arrives wrapped ("Caught ValueError in DataLoader
    worker process 0 ... ValueError: message"); the original last line is what the user wrote.
    """
    text = str(exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and lines[0].startswith("Caught ") and len(lines) > 1:
        return lines[-1].strip()
    first = lines[0] if lines else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(p in str(exc).lower() for p in _OOM_PHRASES)


def _device(request: dict[str, Any]) -> torch.device:
    """The trial's device; the parent shows this process only that GPU, as ``cuda:0``."""
    try:
        return resolve_device(request["device"])
    except ConfigError:
        requested = request.get("requested_device", request["device"])
        if requested == request["device"]:
            raise
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise ConfigError(
            f"--device {requested}: no such CUDA device is visible (the trial "
            f"process got CUDA_VISIBLE_DEVICES={visible!r}); pick an index of a "
            "GPU that nvidia-smi lists"
        ) from None


def _optimizer_name(workload: Workload) -> str:
    """The class name of the optimizer the workload builds (on one throwaway parameter); empty
    when it cannot be built that way."""
    try:
        return type(workload.optimizer([torch.nn.Parameter(torch.zeros(1))])).__name__
    except Exception:
        return ""


def probe(request: dict[str, Any], emit: EventWriter) -> None:
    device = _device(request)
    workload = load_workload(request["workload"])
    try:
        dataset = workload.dataset()
        length = len(dataset) if hasattr(dataset, "__len__") else None
        ndim = input_batch_ndim(workload, dataset)
        workload.model()
    except Exception as exc:
        raise AutotuneError(
            f"building workload {workload.name!r} failed: {describe_exception(exc)}; "
            "fix its model or dataset factory (run with --debug for the traceback)"
        ) from exc
    info = WorkloadInfo(
        name=workload.name or "workload",
        description=workload.description,
        dataset_length=length,
        input_batch_ndim=ndim,
        batch_size=workload.batch_size,
        idle_host_memory_bytes=psutil.Process().memory_info().rss,
        optimizer=_optimizer_name(workload),
    )
    emit(
        {
            "event": "probe",
            "device": device_info(device)
            .model_copy(update={"compile_unavailable": compile_unavailable(device.type)})
            .model_dump(),
            "workload": info.model_dump(),
            "fingerprint": fingerprint(device),
        }
    )


def _cap_device_memory(device: torch.device, budget: int | None) -> None:
    """Hold this process to the job's memory budget on CUDA: passing it is a real CUDA OOM."""
    if device.type == "cuda" and budget:
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, budget / total), device)


def profile(request: dict[str, Any], emit: EventWriter) -> None:
    """Measure the step alone and the loader alone (:mod:`autotune.measure.profiling`)."""
    device = _device(request)
    plan = ProfilePlan(**request["plan"])
    _cap_device_memory(device, request.get("device_memory_budget_bytes"))
    workload = load_workload(request["workload"])
    measured = profile_workload(workload, device, plan)
    emit({"event": "profile", "profile": measured.model_dump(mode="json")})


def trial(request: dict[str, Any], emit: EventWriter) -> None:
    device = _device(request)
    config = Config.model_validate(request["config"])
    plan = MeasurePlan(**request.get("plan", {}))
    _cap_device_memory(device, request.get("device_memory_budget_bytes"))
    workload = load_workload(request["workload"])
    result: dict[str, Any] = {"event": "result", "fingerprint": fingerprint(device)}
    try:
        metrics = measure(workload, config, device, plan, progress=emit)
        result.update(outcome="ok", metrics=metrics.as_dict())
    except NonFiniteLoss as exc:
        result.update(outcome="nonfinite", error=str(exc))
    except Exception as exc:
        traceback.print_exc()
        outcome = "oom" if is_out_of_memory(exc) else "error"
        result.update(outcome=outcome, error=describe_exception(exc))
    if device.type == "cuda":
        result["peak_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))
        result["peak_memory_reserved_bytes"] = int(torch.cuda.max_memory_reserved(device))
    # The kernel's high-water mark catches a spike that fell between the parent's samples.
    result["peak_proportional_bytes"] = peak_proportional_bytes()
    emit(result)


PARENT_PID_ENV = "AUTOTUNE_TRIAL_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Be killed when the process that started this trial dies (a ``kill -9`` of a worker),
    so that an orphaned trial never measures alongside the trials of its replacement."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(os.environ.get(PARENT_PID_ENV, os.getppid())):
        os._exit(1)  # it died before the line above took effect


def run(request: dict[str, Any]) -> NoReturn:
    """Serve ``request`` (a probe or a trial), report on the result pipe and exit."""
    faulthandler.enable()  # a segfault leaves its Python stack in the trial's log
    emit = EventWriter()
    emit({"event": "started", "pid": os.getpid()})
    try:
        modes = {"probe": probe, "profile": profile}
        modes.get(request["mode"], trial)(request, emit)
    except AutotuneError as exc:
        traceback.print_exc()
        emit({"event": "result", "outcome": "error", "error": str(exc), "user_error": True})
    except Exception as exc:
        traceback.print_exc()
        outcome = "oom" if is_out_of_memory(exc) else "error"
        emit({"event": "result", "outcome": outcome, "error": describe_exception(exc)})
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: a stuck DataLoader worker must not hold the result hostage.
    # The parent kills whatever is left of the process group.
    os._exit(0)


def run_forked(request: dict[str, Any], log_fd: int, result_fd: int, server_pid: int) -> NoReturn:
    """:func:`run` in a process just forked from the fork server (see ``_forkserver``).

    It dies with the server, as a started process dies with its worker; its output goes to the
    trial's log and its events to the result pipe the launcher handed down.
    """
    os.environ[PARENT_PID_ENV] = str(server_pid)
    os.environ[RESULT_FD_ENV] = str(result_fd)
    die_with_parent()
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    run(request)


def main() -> None:
    die_with_parent()
    run(json.loads(sys.stdin.read()))


if __name__ == "__main__":
    main()
