"""Running one trial in a fresh process: timeout, memory budget, pruning, cancel, outcome."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import IO, Any

from autotune.errors import AutotuneError, WorkloadError
from autotune.measure import MeasurePlan, TreeMemorySampler, UtilizationSampler
from autotune.runner._protocol import RESULT_FD_ENV
from autotune.space import Config, DeviceInfo, WorkloadInfo
from autotune.store import utcnow

#: Called with each progress event; returning True stops the trial (pruned).
ProgressCallback = Callable[[dict[str, Any]], bool]

_LOG_TAIL_CHARS = 4000


@dataclass
class TrialResult:
    """What one trial process produced, classified into one outcome."""

    outcome: str
    config: Config
    metrics: dict[str, Any] = field(default_factory=dict)
    pruned: bool = False
    cancelled: bool = False
    error: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    peak_host_memory_bytes: int | None = None
    device_utilization: float | None = None
    fingerprint: dict[str, Any] | None = None
    started_at: datetime = field(default_factory=utcnow)
    finished_at: datetime = field(default_factory=utcnow)
    duration_s: float = 0.0
    log_tail: str = ""

    @property
    def peak_memory_bytes(self) -> int | None:
        """Peak memory of the device: reserved CUDA memory, or host memory on a CPU."""
        reserved = self.metrics.get("peak_memory_reserved_bytes")
        return int(reserved) if reserved is not None else self.peak_host_memory_bytes


@dataclass(frozen=True)
class ProbeResult:
    device: DeviceInfo
    workload: WorkloadInfo
    fingerprint: dict[str, Any]


@dataclass
class _Run:
    """Bookkeeping of one child process."""

    process: subprocess.Popen[bytes]
    log: IO[bytes]
    events: queue.Queue[dict[str, Any] | None]
    kill_reason: str | None = None
    kill_detail: str | None = None
    last_progress: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    warmed_up: bool = False

    def kill(self, reason: str, detail: str | None = None) -> None:
        if self.kill_reason is None:
            self.kill_reason, self.kill_detail = reason, detail
        kill_group(self.process.pid)


def kill_group(pid: int) -> None:
    """Kill a trial process and everything it started (its DataLoader workers)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _read_events(stream: IO[str], events: queue.Queue[dict[str, Any] | None]) -> None:
    for line in stream:
        try:
            events.put(json.loads(line))
        except json.JSONDecodeError:
            continue
    events.put(None)


def _start(request: dict[str, Any]) -> _Run:
    read_fd, write_fd = os.pipe()
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by the caller once classified
    env = dict(os.environ, PYTHONUNBUFFERED="1", **{RESULT_FD_ENV: str(write_fd)})
    process = subprocess.Popen(
        [sys.executable, "-m", "autotune.runner._child"],
        stdin=subprocess.PIPE,
        stdout=log,
        stderr=subprocess.STDOUT,
        pass_fds=(write_fd,),
        env=env,
        start_new_session=True,
    )
    os.close(write_fd)
    assert process.stdin is not None
    process.stdin.write(json.dumps(request).encode())
    process.stdin.close()
    events: queue.Queue[dict[str, Any] | None] = queue.Queue()
    reader = threading.Thread(
        target=_read_events, args=(os.fdopen(read_fd, "r"), events), daemon=True
    )
    reader.start()
    return _Run(process=process, log=log, events=events)


def _log_tail(run: _Run) -> str:
    run.log.seek(0, os.SEEK_END)
    size = run.log.tell()
    run.log.seek(max(0, size - _LOG_TAIL_CHARS))
    return run.log.read().decode(errors="replace")


def _drain(run: _Run, on_progress: ProgressCallback | None) -> None:
    while True:
        try:
            event = run.events.get_nowait()
        except queue.Empty:
            return
        if event is None:
            return
        kind = event.get("event")
        if kind == "warmed_up":
            run.warmed_up = True
        elif kind == "progress":
            run.last_progress = event
            if on_progress is not None and on_progress(event) and run.kill_reason is None:
                run.kill("pruned")
        elif kind in ("result", "probe"):
            run.result = event


def _supervise(
    run: _Run,
    timeout_s: float,
    on_progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> None:
    deadline = time.monotonic() + timeout_s
    while run.process.poll() is None:
        _drain(run, on_progress)
        if cancel is not None and cancel.is_set():
            run.kill("cancelled")
        elif time.monotonic() > deadline:
            run.kill("timeout", f"the trial did not finish within its {timeout_s:g} s timeout")
        time.sleep(0.02)
    # The child may have exited while events were still in flight on the pipe.
    end = time.monotonic() + 2.0
    while run.result is None and time.monotonic() < end and run.kill_reason is None:
        _drain(run, on_progress)
        if run.result is None:
            time.sleep(0.02)
    _drain(run, on_progress)
    kill_group(run.process.pid)  # leftover workers of a finished trial


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _last_log_line(tail: str) -> str:
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _classify(run: _Run, result: TrialResult) -> None:
    returncode = run.process.returncode
    result.exit_code = returncode if returncode is not None and returncode >= 0 else None
    if returncode is not None and returncode < 0 and run.kill_reason is None:
        result.signal = _signal_name(returncode)
    if run.kill_reason == "pruned":
        result.outcome, result.pruned = "ok", True
        if run.last_progress is not None:
            result.metrics = {"samples_per_s": run.last_progress["samples_per_s"],
                              "steps": run.last_progress["steps"]}
        return
    if run.kill_reason == "cancelled":
        result.outcome, result.cancelled = "error", True
        result.error = "cancelled while running"
        return
    if run.kill_reason in ("timeout", "oom"):
        result.outcome, result.error = run.kill_reason, run.kill_detail
        return
    if run.result is not None:
        result.outcome = run.result.get("outcome", "error")
        result.error = run.result.get("error")
        result.metrics = dict(run.result.get("metrics") or {})
        for key in ("peak_memory_allocated_bytes", "peak_memory_reserved_bytes"):
            if run.result.get(key) is not None:
                result.metrics[key] = run.result[key]
        result.fingerprint = run.result.get("fingerprint")
        return
    result.outcome = "crashed"
    hint = _last_log_line(result.log_tail)
    if returncode is not None and returncode < 0:
        cause = f"the trial process was killed by {_signal_name(returncode)}"
        if returncode == -signal.SIGKILL:
            cause += " (possibly the kernel's out-of-memory killer)"
    else:
        cause = f"the trial process exited with code {returncode} before reporting"
    result.error = f"{cause}: {hint}" if hint else cause


def run_trial(
    workload: str,
    config: Config,
    device: str,
    plan: MeasurePlan,
    timeout_s: float,
    memory_budget_bytes: int | None = None,
    budget_is_host_memory: bool = True,
    device_index: int | str | None = None,
    on_progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> TrialResult:
    """Measure ``config`` in a fresh process and classify how it ended.

    With ``budget_is_host_memory`` (a CPU device) the process tree is killed as ``oom`` when
    its memory passes the budget; on CUDA the budget caps the trial's device memory instead,
    so exceeding it is a real CUDA out-of-memory error.
    ``device_index`` names the GPU for NVML: its UUID (as ``DeviceInfo.nvml_id`` gives it), or
    an NVML ordinal.
    """
    request = {
        "mode": "trial",
        "workload": workload,
        "device": device,
        "config": config.model_dump(),
        "plan": asdict(plan),
        "device_memory_budget_bytes": None if budget_is_host_memory else memory_budget_bytes,
    }
    result = TrialResult(outcome="error", config=config)
    started = time.monotonic()
    run = _start(request)
    utilization = UtilizationSampler(device_index)

    def over_budget(used: int) -> None:
        run.kill("oom", f"host memory reached {used / 2**20:.0f} MiB, over the memory budget "
                        f"of {memory_budget_bytes / 2**20:.0f} MiB" if memory_budget_bytes else "")

    def sample_utilization() -> None:
        if run.warmed_up:
            utilization.sample()

    sampler = TreeMemorySampler(
        run.process.pid,
        budget_bytes=memory_budget_bytes if budget_is_host_memory else None,
        on_over_budget=over_budget,
        extra_sample=sample_utilization,
    )
    try:
        with sampler:
            _supervise(run, timeout_s, on_progress, cancel)
    except BaseException:
        run.kill("cancelled")
        raise
    finally:
        result.log_tail = _log_tail(run)
        run.log.close()
    _classify(run, result)
    result.peak_host_memory_bytes = sampler.peak_bytes or None
    result.device_utilization = utilization.mean()
    result.duration_s = time.monotonic() - started
    result.finished_at = utcnow()
    return result


def probe_workload(workload: str, device: str, timeout_s: float = 120.0) -> ProbeResult:
    """Load the workload in a fresh process and learn what the search needs to know.

    Raises :class:`WorkloadError` with the workload's own message when it cannot be loaded.
    """
    run = _start({"mode": "probe", "workload": workload, "device": device})
    try:
        _supervise(run, timeout_s)
        tail = _log_tail(run)
    finally:
        run.log.close()
    event = run.result
    if event is not None and event.get("event") == "probe":
        return ProbeResult(
            device=DeviceInfo.model_validate(event["device"]),
            workload=WorkloadInfo.model_validate(event["workload"]),
            fingerprint=event["fingerprint"],
        )
    if event is not None and event.get("user_error"):
        raise WorkloadError(event["error"])
    if event is not None:
        raise WorkloadError(f"loading workload {workload!r} failed: {event.get('error')}; fix "
                            "the workload (run with --debug for the traceback)")
    if run.kill_reason == "timeout":
        raise WorkloadError(f"loading workload {workload!r} took longer than {timeout_s:g} s; "
                            "make its model and dataset factories faster to build")
    raise AutotuneError(
        f"loading workload {workload!r} crashed the process "
        f"(exit {run.process.returncode}): {_last_log_line(tail)}"
    )
