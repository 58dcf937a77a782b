"""Running one trial in a fresh process: timeout, memory cap, pruning, cancel, outcome."""

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
from dataclasses import asdict, dataclass
from typing import IO, Any

import psutil

from autotune.errors import AutotuneError, WorkloadError
from autotune.measure import MeasurePlan, ProfilePlan, TreeMemorySampler, UtilizationSampler
from autotune.predict import Profile
from autotune.runner._devices import trial_device
from autotune.runner._environment import trial_environment
from autotune.runner._launcher import (
    ForkedProcess,
    TrialProcess,
    active_launcher,
    active_ranks,
)
from autotune.runner._oom import OomKillCounter
from autotune.runner._protocol import RESULT_FD_ENV
from autotune.runner._ranks import check_gpu_count
from autotune.space import Config, DeviceInfo, WorkloadInfo
from autotune.store import TrialRecord, utcnow

#: Called with each progress event (``warmup`` ones first, then the window's); returning True
#: stops the trial (pruned).
ProgressCallback = Callable[[dict[str, Any]], bool]

_LOG_TAIL_CHARS = 4000

#: Without ``--max-memory`` (and on CUDA, where the budget caps device memory) a trial's process
#: tree may use at most this share of the host memory available when it starts: a runaway
#: configuration is stopped as ``oom`` before it drives the machine into swap or the kernel's
#: out-of-memory killer takes another process.
DEFAULT_HOST_MEMORY_SHARE = 0.8
#: A trial killed by a SIGKILL we did not send, whose highest memory reading was at least this
#: share of its cap, was killed by the kernel for memory (readings lag the allocation that
#: tipped it over, so "near" the cap is the most a sampler can see).
NEAR_CAP_SHARE = 0.9


class TrialCancelled(Exception):
    """The caller's cancel event was set while the trial ran; nothing was measured."""


@dataclass(frozen=True)
class ProbeResult:
    device: DeviceInfo
    workload: WorkloadInfo
    fingerprint: dict[str, Any]

    @property
    def device_uuid(self) -> str | None:
        """NVML's name (``GPU-...``) of the GPU the probe saw; None on a CPU."""
        uuid = self.fingerprint.get("device_uuid")
        return str(uuid) if uuid else None


@dataclass
class _Run:
    """Bookkeeping of one child process."""

    process: TrialProcess
    log: IO[bytes]
    events: queue.Queue[dict[str, Any] | None]
    started: float
    kill_reason: str | None = None
    kill_detail: str | None = None
    last_progress: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    warmed_up: bool = False
    #: Seconds of compiling after which the trial is stopped as pruned (None: never).
    compile_allowance_s: float | None = None
    #: When the child said it started compiling; None before and after.
    compiling_since: float | None = None
    #: The first ``rank_failed`` event of a trial of several ranks: its outcome and reason.
    rank_failure: dict[str, Any] | None = None

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
    """Start a trial process for ``request``, showing it only the GPU it is asked to use.

    It is forked from this thread's :class:`TrialLauncher` for the device when there is one
    and its server can be used; otherwise it starts as ``python -m autotune.runner._child``,
    and the trial's log says why.
    """
    launcher = active_launcher(request["device"])
    ranks = active_ranks()
    gpus = ranks.nproc
    target = trial_device(request["device"], os.environ, gpus)
    request = dict(
        request,
        device=target.device,
        requested_device=request["device"],
        **ranks.request_fields(request["mode"]),
    )
    read_fd, write_fd = os.pipe()
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by the caller once classified
    process: TrialProcess | None = None
    if launcher is not None:
        try:
            process = launcher.fork(request, target.environment(), log, write_fd)
        except BaseException:
            for fd in (read_fd, write_fd):
                os.close(fd)
            log.close()
            raise
        if process is None:
            log.write(
                f"autotune: trial started as a new interpreter, not forked from the "
                f"warm server: {launcher.unavailable or 'the server stopped'}\n".encode()
            )
            log.flush()
    if process is None:
        process = _exec(request, target.environment(), log, write_fd)
    os.close(write_fd)
    events: queue.Queue[dict[str, Any] | None] = queue.Queue()
    reader = threading.Thread(
        target=_read_events, args=(os.fdopen(read_fd, "r"), events), daemon=True
    )
    reader.start()
    return _Run(process=process, log=log, events=events, started=time.monotonic())


def _exec(
    request: dict[str, Any], environment: dict[str, str], log: IO[bytes], write_fd: int
) -> subprocess.Popen[bytes]:
    """Start ``python -m autotune.runner._child`` (the start without the fork server)."""
    env = dict(
        trial_environment(os.environ),
        PYTHONUNBUFFERED="1",
        **{RESULT_FD_ENV: str(write_fd)},
        AUTOTUNE_TRIAL_PARENT_PID=str(os.getpid()),  # see _child.die_with_parent
        **environment,
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "autotune.runner._child"],
        stdin=subprocess.PIPE,
        stdout=log,
        stderr=subprocess.STDOUT,
        pass_fds=(write_fd,),
        env=env,
        start_new_session=True,
    )
    assert process.stdin is not None
    process.stdin.write(json.dumps(request).encode())
    process.stdin.close()
    return process


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
        elif kind == "compiling":
            run.compiling_since = time.monotonic()
        elif kind == "compiled":
            run.compiling_since = None
        elif kind == "progress":
            run.last_progress = event  # a warm-up one until the window starts
            if on_progress is not None and on_progress(event) and run.kill_reason is None:
                run.kill("pruned")
        elif kind in ("result", "probe", "profile"):
            run.result = event
        elif kind == "rank_failed" and run.rank_failure is None:
            # One rank ended: the others wait in a collective for ever. End them all now.
            run.rank_failure = event
            run.kill("rank_failed", str(event.get("error")))


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
        elif _compiled_too_long(run):
            run.last_progress = {"warmup": True, "compile_s": run.compile_allowance_s}
            run.kill("pruned")
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


def _compiled_too_long(run: _Run) -> bool:
    """Whether ``run`` has been compiling for longer than its allowance."""
    if run.compile_allowance_s is None or run.compiling_since is None:
        return False
    return time.monotonic() - run.compiling_since > run.compile_allowance_s


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _last_log_line(tail: str) -> str:
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1] if lines else ""


@dataclass(frozen=True)
class _HostMemory:
    """What the parent saw of a finished trial's host memory, and the cap it was held to."""

    peak_bytes: int
    cap_bytes: int
    #: Out-of-memory kills the kernel counted in the trial's memory cgroup while it ran.
    kernel_oom_kills: int | None

    def killed_by_kernel(self, returncode: int | None) -> bool:
        """A SIGKILL we did not send, with the kernel's OOM counter (or our reading) as proof."""
        if returncode != -signal.SIGKILL:
            return False
        return bool(self.kernel_oom_kills) or self.peak_bytes >= NEAR_CAP_SHARE * self.cap_bytes


def _crash_message(returncode: int | None, tail: str) -> str:
    hint = _last_log_line(tail)
    if returncode is not None and returncode < 0:
        cause = f"the trial process was killed by {_signal_name(returncode)}"
    else:
        cause = f"the trial process exited with code {returncode} before reporting"
    return f"{cause}: {hint}" if hint else cause


def _outcome(run: _Run, memory: _HostMemory, tail: str) -> dict[str, Any]:
    """The outcome and measured values of a finished trial, as fields of its record."""
    returncode = run.process.returncode
    fields: dict[str, Any] = {
        "exit_code": returncode if returncode is not None and returncode >= 0 else None,
    }
    if returncode is not None and returncode < 0 and run.kill_reason is None:
        fields["signal"] = _signal_name(returncode)
    if run.kill_reason == "pruned":
        progress = run.last_progress or {}
        in_warmup = bool(progress.get("warmup"))
        return fields | {
            "outcome": "ok",
            "pruned": True,
            "pruned_during_warmup": in_warmup,
            "samples_per_s": progress.get("samples_per_s"),
            "compile_s": progress.get("compile_s"),
            "warmup_steps" if in_warmup else "steps": progress.get("steps"),
        }
    if run.kill_reason in ("timeout", "oom"):
        return fields | {"outcome": run.kill_reason, "error": run.kill_detail}
    if run.kill_reason == "rank_failed" and run.rank_failure is not None:
        outcome = run.rank_failure.get("outcome", "error")
        return {
            "exit_code": None,
            "outcome": outcome
            if outcome in ("oom", "nonfinite", "crashed", "unsuited")
            else "error",
            "error": run.rank_failure.get("error"),
        }
    if run.result is not None:
        result = run.result
        metrics = dict(result.get("metrics") or {})
        for key in ("peak_memory_allocated_bytes", "peak_memory_reserved_bytes"):
            if result.get(key) is not None:
                metrics[key] = result[key]
        return (
            fields
            | metrics
            | {
                "outcome": result.get("outcome", "error"),
                "error": result.get("error"),
                "fingerprint": result.get("fingerprint"),
            }
        )
    if run.kill_reason is None and memory.killed_by_kernel(returncode):
        return fields | {
            "outcome": "oom",
            "error": (
                f"the kernel's out-of-memory killer stopped the trial (SIGKILL) with its processes "
                f"at {memory.peak_bytes / 2**20:.0f} MiB of host memory; lower the batch size or "
                "the workers, or free memory on this machine"
            ),
        }
    return fields | {"outcome": "crashed", "error": _crash_message(returncode, tail)}


def default_host_memory_cap() -> int:
    """:data:`DEFAULT_HOST_MEMORY_SHARE` of the host memory available now."""
    return int(DEFAULT_HOST_MEMORY_SHARE * psutil.virtual_memory().available)


def _host_cap(
    memory_budget_bytes: int | None, budget_is_host_memory: bool, ranks: int = 1
) -> tuple[int, str]:
    """The host memory a trial or profile process tree of ``ranks`` ranks is held to, and its
    name in messages: the budget (per rank) where it caps host memory (a CPU device),
    otherwise the default cap, of which the ranks get their share of the host."""
    if budget_is_host_memory and memory_budget_bytes is not None:
        return memory_budget_bytes * ranks, "the memory budget" + (
            f" ({ranks} ranks)" if ranks > 1 else ""
        )
    plan = active_ranks()
    share = plan.memory_share(ranks)
    if share >= 1:
        return default_host_memory_cap(), (
            f"the default cap ({DEFAULT_HOST_MEMORY_SHARE:.0%} of the memory available; "
            "set --max-memory to change it)"
        )
    return int(share * default_host_memory_cap()), (
        f"{ranks} of {plan.host_share} ranks' share of the default cap "
        f"({DEFAULT_HOST_MEMORY_SHARE:.0%} of the memory available)"
    )


def _supervise_under_cap(
    run: _Run,
    cap: int,
    over_cap_message: Callable[[int], str],
    timeout_s: float,
    on_progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    extra_sample: Callable[[], None] | None = None,
) -> tuple[int, str]:
    """Supervise ``run`` with its process tree's host memory held to ``cap`` (passing it kills
    the tree as ``oom``); returns the peak host memory and the tail of its log.

    Raises :class:`TrialCancelled` when ``cancel`` was set meanwhile.
    """

    def over_cap(used: int) -> None:
        run.kill("oom", over_cap_message(used))

    # A forked trial shares its imports' pages with its server: counting the server's share of
    # them keeps the reading what a trial that imported everything itself would read.
    server = run.process.server_pid if isinstance(run.process, ForkedProcess) else None
    sampler = TreeMemorySampler(
        run.process.pid,
        budget_bytes=cap,
        on_over_budget=over_cap,
        extra_sample=extra_sample,
        sharing_pids=(server,) if server is not None else (),
    )
    try:
        with sampler:
            _supervise(run, timeout_s, on_progress, cancel)
    except BaseException:
        run.kill("cancelled")
        raise
    finally:
        tail = _log_tail(run)
        run.log.close()
    if run.kill_reason == "cancelled":
        raise TrialCancelled
    return sampler.peak_bytes, tail


def run_trial(
    workload: str,
    config: Config,
    device: str,
    plan: MeasurePlan,
    timeout_s: float,
    memory_budget_bytes: int | None = None,
    budget_is_host_memory: bool = True,
    device_uuid: str | None = None,
    on_progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    compile_allowance_s: float | None = None,
) -> TrialRecord:
    """Measure ``config`` in a fresh process and classify how it ended.

    The process tree's host memory is always capped: by the budget with
    ``budget_is_host_memory`` (a CPU device), otherwise by :func:`default_host_memory_cap`;
    passing the cap, or being killed by the kernel's out-of-memory killer, is ``oom``. On CUDA
    the budget caps the trial's device memory instead, so exceeding it is a real CUDA
    out-of-memory error. ``device_uuid`` (NVML's ``GPU-...``) names the GPU whose utilisation
    is sampled. A trial still compiling after ``compile_allowance_s`` seconds is stopped as
    pruned during warm-up, with that allowance as its ``compile_s`` (a lower bound). Raises
    :class:`TrialCancelled` when ``cancel`` is set meanwhile.
    """
    request = {
        "mode": "trial",
        "workload": workload,
        "device": device,
        "config": config.model_dump(),
        "plan": asdict(plan),
        "device_memory_budget_bytes": None if budget_is_host_memory else memory_budget_bytes,
    }
    started_at = utcnow()
    cap, cap_name = _host_cap(memory_budget_bytes, budget_is_host_memory, active_ranks().nproc)
    oom_kills = OomKillCounter.of_this_process()
    kills_before = oom_kills.read()
    run = _start(request)
    run.compile_allowance_s = compile_allowance_s
    utilization = UtilizationSampler(device_uuid)

    def sample_utilization() -> None:
        if run.warmed_up:
            utilization.sample()

    def over_cap_message(used: int) -> str:
        return (
            f"host memory reached {used / 2**20:.0f} MiB, over {cap_name} of {cap / 2**20:.0f} MiB"
        )

    peak_bytes, tail = _supervise_under_cap(
        run, cap, over_cap_message, timeout_s, on_progress, cancel, sample_utilization
    )
    # The trial's own high-water mark holds a spike that fell between two samples.
    peak_bytes = max(peak_bytes, int((run.result or {}).get("peak_proportional_bytes") or 0))
    kills_after = oom_kills.read()
    memory = _HostMemory(
        peak_bytes=peak_bytes,
        cap_bytes=cap,
        kernel_oom_kills=None
        if kills_before is None or kills_after is None
        else kills_after - kills_before,
    )
    fields = _outcome(run, memory, tail)
    if fields["outcome"] == "ok" and peak_bytes > cap:
        fields = {
            "exit_code": fields["exit_code"],
            "outcome": "oom",
            "error": (
                f"{over_cap_message(peak_bytes)} (the trial's own high-water mark, reached between "
                "two samples)"
            ),
        }
    record = TrialRecord.model_validate(
        fields
        | {
            "config": config,
            "peak_host_memory_bytes": peak_bytes or None,
            "device_utilization": utilization.mean(),
            "started_at": started_at,
            "finished_at": utcnow(),
            "duration_s": time.monotonic() - run.started,
        }
    )
    return _with_budget_verdict(record, memory_budget_bytes)


def _with_budget_verdict(record: TrialRecord, budget: int | None) -> TrialRecord:
    peak = record.peak_memory_bytes
    if budget is None or peak is None:
        return record
    return record.model_copy(update={"within_budget": peak <= budget and record.outcome != "oom"})


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
        # The probe saw its GPU as cuda:0; the job records the index the user named.
        index = trial_device(device, os.environ).requested_index
        info = DeviceInfo.model_validate(event["device"])
        if info.is_cuda and event.get("gpu_count") is not None and active_ranks().distributed:
            check_gpu_count(active_ranks().nproc, int(event["gpu_count"]))
        return ProbeResult(
            device=info.model_copy(update={"index": index}) if info.is_cuda else info,
            workload=WorkloadInfo.model_validate(event["workload"]),
            fingerprint=event["fingerprint"],
        )
    if event is not None and event.get("user_error"):
        raise WorkloadError(event["error"])
    if event is not None:
        raise WorkloadError(
            f"loading workload {workload!r} failed: {event.get('error')}; fix "
            "the workload (run with --debug for the traceback)"
        )
    if run.kill_reason == "timeout":
        raise WorkloadError(
            f"loading workload {workload!r} took longer than {timeout_s:g} s; "
            "make its model and dataset factories faster to build"
        )
    raise AutotuneError(
        f"loading workload {workload!r} crashed the process "
        f"(exit {run.process.returncode}): {_last_log_line(tail)}"
    )


class ProfileFailed(AutotuneError):
    """The profile process did not deliver a profile; the job searches without one."""


def profile_workload(
    workload: str,
    device: str,
    plan: ProfilePlan,
    timeout_s: float,
    memory_budget_bytes: int | None = None,
    budget_is_host_memory: bool = True,
    cancel: threading.Event | None = None,
) -> Profile:
    """Measure the step alone and the loader alone in a fresh process (see
    :mod:`autotune.measure.profiling`), held to a timeout and a memory cap as a trial is.

    Raises :class:`ProfileFailed` saying why when no profile came back, and
    :class:`TrialCancelled` when ``cancel`` is set meanwhile.
    """
    request = {
        "mode": "profile",
        "workload": workload,
        "device": device,
        "plan": asdict(plan),
        "device_memory_budget_bytes": None if budget_is_host_memory else memory_budget_bytes,
    }
    cap, cap_name = _host_cap(memory_budget_bytes, budget_is_host_memory, active_ranks().nproc)
    run = _start(request)

    _, tail = _supervise_under_cap(
        run,
        cap,
        lambda used: (
            f"the profile's host memory reached {used / 2**20:.0f} MiB, "
            f"over {cap_name} of {cap / 2**20:.0f} MiB"
        ),
        timeout_s,
        cancel=cancel,
    )
    event = run.result
    if event is not None and event.get("event") == "profile":
        return Profile.model_validate(event["profile"])
    if run.kill_reason is not None:
        raise ProfileFailed(f"profiling stopped: {run.kill_detail or run.kill_reason}")
    if event is not None:
        raise ProfileFailed(f"profiling failed: {event.get('error')}")
    raise ProfileFailed(f"profiling crashed: {_crash_message(run.process.returncode, tail)}")
