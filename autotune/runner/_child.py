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
    UnsuitedValue,
    compile_unavailable,
    device_info,
    fingerprint,
    input_batch_ndim,
    measure,
    peak_proportional_bytes,
    resolve_device,
    supported_implementations,
    use_expandable_segments,
)
from autotune.measure import profile as profile_workload
from autotune.measure.profiling import follow, start_conducting
from autotune.runner._protocol import RESULT_FD_ENV, EventWriter
from autotune.runner._ranks import (
    combine_metrics,
    rank_failure,
    restrict_host,
    start_ranks,
    watch_ranks,
)
from autotune.space import Config, WorkloadInfo
from autotune.workload import load_workload

#: Seconds rank 0, failing, waits to learn whether another rank's end caused its error.
_PEER_GRACE_S = 0.5
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
    # The optimizer's class, and the implementations it steps with on this device.
    optimizer, optimizer_impls = supported_implementations(workload, device)
    info = WorkloadInfo(
        name=workload.name or "workload",
        description=workload.description,
        dataset_length=length,
        input_batch_ndim=ndim,
        batch_size=workload.batch_size,
        idle_host_memory_bytes=psutil.Process().memory_info().rss,
        optimizer=optimizer,
        optimizer_impls=optimizer_impls,
        baseline=workload.baseline,
    )
    emit(
        {
            "event": "probe",
            "device": device_info(device)
            .model_copy(update={"compile_unavailable": compile_unavailable(device.type)})
            .model_dump(),
            "workload": info.model_dump(),
            "fingerprint": fingerprint(device),
            # The GPUs this process sees: the ranks of --nproc-per-node need one each.
            "gpu_count": torch.cuda.device_count() if device.type == "cuda" else None,
        }
    )


def _cap_device_memory(device: torch.device, budget: int | None) -> None:
    """Hold this process to the job's memory budget on CUDA: passing it is a real CUDA OOM."""
    if device.type == "cuda" and budget:
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, budget / total), device)


def profile(request: dict[str, Any], emit: EventWriter) -> None:
    """Measure the step alone and the loader alone (:mod:`autotune.measure.profiling`)."""
    if int(request.get("ranks") or 1) > 1:
        ranked_profile(request, emit)
        return
    device = _device(request)
    plan = ProfilePlan(**request["plan"])
    _cap_device_memory(device, request.get("device_memory_budget_bytes"))
    workload = load_workload(request["workload"])
    measured = profile_workload(workload, device, plan)
    emit({"event": "profile", "profile": measured.model_dump(mode="json")})


def trial(request: dict[str, Any], emit: EventWriter) -> None:
    if int(request.get("ranks") or 1) > 1:
        ranked_trial(request, emit)
        return
    device = _device(request)
    config = Config.model_validate(request["config"])
    if config.expandable_segments and device.type == "cuda":
        use_expandable_segments()  # before CUDA starts, which reads it once
    plan = MeasurePlan(**request.get("plan", {}))
    _cap_device_memory(device, request.get("device_memory_budget_bytes"))
    workload = load_workload(request["workload"])
    result: dict[str, Any] = {"event": "result", "fingerprint": fingerprint(device)}
    try:
        metrics = measure(workload, config, device, plan, progress=emit)
        result.update(outcome="ok", metrics=metrics.as_dict())
    except NonFiniteLoss as exc:
        result.update(outcome="nonfinite", error=str(exc))
    except UnsuitedValue as exc:  # set aside by the job, never measured again
        result.update(outcome="unsuited", error=str(exc))
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


def _fork_ranks(world: int, emit: EventWriter) -> tuple[int, list[int], Any]:
    """Ranks 1..``world``-1 forked from this process (see :func:`start_ranks`): this
    process's rank, the others' pids and, in rank 0, the event set once one of them failed."""
    rank0 = os.getpid()

    def in_rank() -> None:
        os.environ[PARENT_PID_ENV] = str(rank0)
        die_with_parent()

    rank, others = start_ranks(world, in_rank)
    return rank, others, watch_ranks(others, world, emit) if rank == 0 else None


def _join_group(request: dict[str, Any], rank: int) -> torch.device:
    """This rank's device (one GPU per rank, as ``LOCAL_RANK`` picks it), torchrun's one
    thread per rank, and the process group (NCCL on CUDA, gloo on a CPU)."""
    device = _device(request)
    if device.type == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    restrict_host(None, 1)  # torchrun's default of one thread per rank
    torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
    _cap_device_memory(device, request.get("device_memory_budget_bytes"))
    return device


def _rank_failed(
    exc: Exception, rank: int, world: int, peer_failed: Any, emit: EventWriter
) -> NoReturn:
    """Report this rank's failure (unless a peer's end caused it) and end the rank."""
    traceback.print_exc()
    if peer_failed is not None and peer_failed.wait(_PEER_GRACE_S):
        os._exit(1)  # a peer's end broke the collective: its reason is the trial's
    outcome = (
        "nonfinite"
        if isinstance(exc, NonFiniteLoss)
        else "unsuited"  # set aside by the job, as a single-process trial's
        if isinstance(exc, UnsuitedValue)
        else "oom"
        if is_out_of_memory(exc)
        else "error"
    )
    emit(rank_failure(rank, world, outcome, describe_exception(exc)))
    sys.stdout.flush()
    os._exit(1)


def ranked_profile(request: dict[str, Any], emit: EventWriter) -> None:
    """Profile as ``request["ranks"]`` ranks (see
    :mod:`autotune.measure.profiling._lockstep`): rank 0, this process, measures and reports
    one rank's profile; the others run its sweeps beside it, then end."""
    world = int(request["ranks"])
    rank, others, peer_failed = _fork_ranks(world, emit)
    try:
        device = _join_group(request, rank)
        plan = ProfilePlan(**request["plan"])
        workload = load_workload(request["workload"])
        if rank == 0:
            start_conducting(frozenset(others))
            measured = profile_workload(workload, device, plan)
        else:
            follow(workload, device, plan)
    except Exception as exc:
        _rank_failed(exc, rank, world, peer_failed, emit)
    if rank != 0:
        sys.stdout.flush()
        os._exit(0)
    emit({"event": "profile", "profile": measured.model_dump(mode="json")})


def ranked_trial(request: dict[str, Any], emit: EventWriter) -> None:
    """Measure the configuration as ``request["ranks"]`` DDP ranks (see
    :mod:`autotune.runner._ranks`); rank 0, this process, reports the trial."""
    world = int(request["ranks"])
    rank, _, peer_failed = _fork_ranks(world, emit)
    try:
        device = _join_group(request, rank)
        config = Config.model_validate(request["config"])
        plan = MeasurePlan(**request.get("plan", {}))
        workload = load_workload(request["workload"])

        def global_progress(event: dict[str, Any]) -> None:
            if "samples_per_s" in event:  # every rank steps in step with rank 0
                event = dict(event, samples_per_s=event["samples_per_s"] * world)
            emit(event)

        metrics = measure(
            workload, config, device, plan, progress=global_progress if rank == 0 else None
        )
        mine = metrics.as_dict()
        # Each rank's own high-water mark: their sum bounds the ranks' peak together, which
        # the parent's sampler (at the lowest priority, on cores the ranks keep busy) can miss.
        peak = peak_proportional_bytes()
        if device.type == "cuda":
            mine["peak_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated(device))
            mine["peak_memory_reserved_bytes"] = int(torch.cuda.max_memory_reserved(device))
        gathered: list[Any] = [None] * world
        torch.distributed.all_gather_object(gathered, (mine, peak))
    except Exception as exc:
        _rank_failed(exc, rank, world, peer_failed, emit)
    if rank != 0:
        sys.stdout.flush()
        os._exit(0)
    combined = combine_metrics([rank_metrics for rank_metrics, _ in gathered])
    emit(
        {
            "event": "result",
            "fingerprint": fingerprint(device),
            "outcome": "ok",
            "metrics": combined,
            "peak_memory_allocated_bytes": combined.get("peak_memory_allocated_bytes"),
            "peak_memory_reserved_bytes": combined.get("peak_memory_reserved_bytes"),
            "peak_proportional_bytes": sum(peak for _, peak in gathered),
            "ranks": world,
        }
    )


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
        cores = request.get("cores")
        # One rank's share of the host (--host-share): its cores, and a thread on each.
        restrict_host(cores, len(cores) if cores else None)
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
