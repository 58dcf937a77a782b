"""Trials forked from a warm server: still fresh, isolated processes, classified as before."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import torch

from autotune.errors import ConfigError, WorkloadError
from autotune.measure import MeasurePlan
from autotune.measure import _host_memory as host_memory
from autotune.runner import START_ENV, TrialLauncher, probe_workload, run_trial
from autotune.runner._forkserver import send
from autotune.runner._launcher import _Server
from autotune.space import Config
from tests.conftest import FAST

PLAN = MeasurePlan(**FAST)
pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="the fork server needs Linux"),
    pytest.mark.slow,
]


@pytest.fixture(autouse=True)
def _fork_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(START_ENV, raising=False)


@contextlib.contextmanager
def launcher(workload: str, device: str = "cpu") -> Iterator[TrialLauncher]:
    with TrialLauncher(workload, device) as started:
        yield started


def _trial(workload: str, config: Config | None = None, **kwargs: object):  # noqa: ANN202
    timeout = kwargs.pop("timeout_s", 60)
    return run_trial(workload, config or Config(batch_size=16), "cpu", PLAN, timeout, **kwargs)


def _fields(error: str) -> dict[str, str]:
    return dict(re.findall(r"(\S+)=(\S+)", error))


def test_a_forked_trial_is_its_own_session_under_the_server(workload_file) -> None:
    workload = workload_file("process_checks") + ":lineage"
    with launcher(workload) as started:
        first = _fields(_trial(workload).error)
        second = _fields(_trial(workload).error)
        server = started.server_pid
    assert started.unavailable is None
    for seen in (first, second):
        assert int(seen["ppid"]) == server  # forked by the server, not started by us
        assert seen["sid"] == seen["pid"] == seen["pgid"]  # its own session: kill_group works
    assert first["pid"] != second["pid"]
    # What constructing an optimizer imports on first use came with the server's imports.
    assert first["dynamo"] == second["dynamo"] == "True"
    assert not psutil.pid_exists(server) or psutil.Process(server).status() == "zombie"


def test_an_ok_forked_trial_records_every_metric_of_its_whole_tree(workload_file) -> None:
    workload = workload_file("tiny")
    with launcher(workload) as started:
        result = _trial(workload, Config(batch_size=16, num_workers=2, prefetch_factor=2))
        assert started.server_pid is not None
    assert result.outcome == "ok", result.error
    assert result.steps >= FAST["min_steps"] and result.samples_per_s > 0
    # The trial and its two workers, not the server's share of the imports alone.
    assert result.peak_host_memory_bytes > 50 * 2**20


def test_a_forked_trial_reads_the_host_memory_an_exec_started_one_reads(
    workload_file, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PSS splits the pages a forked trial shares with its server; the server is counted too,
    # so the imports weigh in full, as they do in a trial that imported them itself.
    workload = workload_file("tiny")
    with launcher(workload):
        forked = _trial(workload).peak_host_memory_bytes
    monkeypatch.setenv(START_ENV, "exec")
    started = _trial(workload).peak_host_memory_bytes
    assert forked == pytest.approx(started, rel=0.15), (forked, started)


def test_global_state_set_by_one_trial_is_default_in_the_next(workload_file) -> None:
    workload = workload_file("process_checks") + ":global_state"
    with launcher(workload):
        first = _trial(workload).error
        second = _trial(workload).error
        lineage = _fields(_trial(workload_file("process_checks") + ":lineage").error)
    assert "calls=0" in first and "cudnn.benchmark=False" in first
    assert second == first  # each trial found what the first found, not what it left behind
    assert lineage["marker"] == "False"


def test_a_trial_steps_on_the_intra_op_threads_its_configuration_sets(workload_file) -> None:
    workload = workload_file("process_checks") + ":step_threads"
    with launcher(workload):
        one = _fields(_trial(workload, Config(batch_size=16, intra_op_threads=1)).error)
        three = _fields(_trial(workload, Config(batch_size=16, intra_op_threads=3)).error)
        default = _fields(_trial(workload).error)
    assert (one["threads"], three["threads"]) == ("1", "3")
    assert default["threads"] == str(torch.get_num_threads())  # PyTorch's own, untouched


def test_a_segfault_is_classified_and_the_server_keeps_serving(workload_file) -> None:
    workload = workload_file("crash")
    with launcher(workload) as started:
        result = _trial(workload)
        server = started.server_pid
        probe = probe_workload(workload, "cpu")  # the same server, still there
        assert started.server_pid == server
    assert result.outcome == "crashed" and result.signal == "SIGSEGV"
    assert "SIGSEGV" in result.error
    assert probe.workload.name == "crash"


def test_a_trial_whose_exit_is_reported_with_its_fork_reply_is_seen_to_exit() -> None:
    """The server reports a trial's exit right behind its fork reply when the trial ended
    while the launcher's process was stopped (SIGSTOP, a starved VM): that exit must reach the
    launcher's trial, or supervising it waits forever with the device held. This plays the
    server's side of the socket, so both reports are there before the launcher reads either."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    server = _Server.__new__(_Server)  # its process is the stand-in; its socket is ours
    server.sock, server.process, server.children, server._replies = ours, stand_in, {}, []
    server._lock, server._closed = threading.Condition(), False
    try:
        send(theirs, {"forked": 4321})
        send(theirs, {"exited": 4321, "returncode": 3})
        send(theirs, {"read": "up to here"})  # once queued, the exit before it was handled
        threading.Thread(target=server._read, daemon=True).start()
        deadline = time.monotonic() + 10
        while len(server._replies) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        child = server.fork({"fork": {}}, [])
        assert child is not None and child.pid == 4321
        assert child.wait(5) == 3
    finally:
        theirs.close()
        ours.close()
        stand_in.kill()
        stand_in.wait()


def test_a_self_inflicted_sigkill_is_a_crash(workload_file) -> None:
    workload = workload_file("process_checks") + ":sigkill"
    with launcher(workload):
        result = _trial(workload)
    assert result.outcome == "crashed" and result.signal == "SIGKILL"


def test_a_hung_forked_trial_times_out_with_its_workers(workload_file) -> None:
    workload = workload_file("hang")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with launcher(workload) as started:
        result = _trial(workload, Config(batch_size=16, num_workers=2), timeout_s=6)
        server = psutil.Process(started.server_pid)
        _, alive = psutil.wait_procs(server.children(recursive=True), timeout=5)
        assert alive == [], "the timed-out trial or its workers outlived it"
    assert result.outcome == "timeout" and "6 s timeout" in result.error
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before  # the server stopped with its launcher


def test_the_memory_budget_caps_a_forked_trial(workload_file) -> None:
    workload = workload_file("memory_hog")
    budget = 500 * 2**20
    with launcher(workload):
        result = _trial(workload, Config(batch_size=256), memory_budget_bytes=budget)
    assert result.outcome == "oom" and "over the memory budget" in result.error


def test_a_spike_between_two_memory_samples_is_still_over_the_budget(
    workload_file, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One sample at the start and none after: only the trial's own high-water mark sees the
    # batches (a short trial on a busy machine gets few samples).
    monkeypatch.setattr(host_memory, "MIN_INTERVAL_S", 3600.0)
    workload = workload_file("memory_hog")
    budget = 500 * 2**20
    with launcher(workload):
        small = _trial(workload, Config(batch_size=8), memory_budget_bytes=budget)
        large = _trial(workload, Config(batch_size=256), memory_budget_bytes=budget)
    assert small.outcome == "ok" and small.peak_host_memory_bytes <= budget
    assert large.outcome == "oom" and "high-water mark" in large.error
    assert large.peak_host_memory_bytes > budget and not large.usable


def test_the_server_and_a_cpu_trial_see_no_gpu(workload_file) -> None:
    workload = workload_file("process_checks") + ":visible_devices"
    with launcher(workload) as started:
        result = _trial(workload)
        server_env = psutil.Process(started.server_pid).environ()
    assert result.error == "RuntimeError: visible='' count=0"
    assert server_env["CUDA_VISIBLE_DEVICES"] == ""


def test_a_cuda_trial_forked_from_the_server_is_shown_only_its_gpu(
    workload_file, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0000aaaa,GPU-0000bbbb")
    workload = workload_file("tiny")
    with launcher(workload, "cuda:1") as started:
        result = run_trial(workload, Config(batch_size=16), "cuda:1", PLAN, 60)
        with pytest.raises(WorkloadError, match="CUDA_VISIBLE_DEVICES='GPU-0000bbbb'"):
            probe_workload(workload, "cuda:1")
        assert started.unavailable is None
    assert "CUDA_VISIBLE_DEVICES='GPU-0000bbbb'" in result.error


def test_a_workload_that_cannot_be_imported_falls_back_and_says_why(workload_file) -> None:
    workload = workload_file("import_error")
    with launcher(workload) as started, pytest.raises(WorkloadError) as caught:
        probe_workload(workload, "cpu")
    assert "failed to import: ModuleNotFoundError" in str(caught.value)
    assert started.unavailable is not None and "cannot be imported" in started.unavailable


def test_a_workload_that_starts_threads_at_import_falls_back(workload_file) -> None:
    workload = workload_file("thread_at_import")
    with launcher(workload) as started:
        probe = probe_workload(workload, "cpu")
    assert probe.workload.name == "tiny"
    assert started.unavailable is not None and "started threads" in started.unavailable


def test_exec_start_is_forced_by_the_environment(
    workload_file, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(START_ENV, "exec")
    workload = workload_file("process_checks") + ":lineage"
    with launcher(workload) as started:
        seen = _fields(_trial(workload).error)
    assert started.unavailable == f"{START_ENV}=exec" and started.server_pid is None
    assert int(seen["ppid"]) == os.getpid()
    monkeypatch.setenv(START_ENV, "spawn")
    with launcher(workload), pytest.raises(ConfigError, match="set it to 'fork'"):
        _trial(workload)


def test_a_trial_is_only_forked_for_the_launchers_device(workload_file) -> None:
    workload = workload_file("process_checks") + ":lineage"
    with launcher(workload, "cuda:0") as started:
        seen = _fields(_trial(workload).error)  # a CPU trial: started the old way
    assert started.server_pid is None and int(seen["ppid"]) == os.getpid()


_WORKER = """
import sys
from autotune.measure import MeasurePlan
from autotune.measure import _host_memory as host_memory
from autotune.runner import TrialLauncher, run_trial
from autotune.space import Config
with TrialLauncher(sys.argv[1], "cpu"):
    run_trial(sys.argv[1], Config(batch_size=16), "cpu", MeasurePlan(), 600)
"""


def test_killing_the_worker_kills_its_server_and_trial(workload_file, tmp_path: Path) -> None:
    pid_file = tmp_path / "trial.pid"
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root), AUTOTUNE_TEST_PID_FILE=str(pid_file))
    worker = subprocess.Popen(
        [sys.executable, "-c", _WORKER, workload_file("process_checks") + ":sleep_forever"], env=env
    )
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text():
            assert worker.poll() is None, "the stand-in worker exited early"
            assert time.monotonic() < deadline, "the trial never started"
            time.sleep(0.1)
        trial = psutil.Process(int(pid_file.read_text()))
        server = psutil.Process(trial.ppid())
        assert server.ppid() == worker.pid
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        _, alive = psutil.wait_procs([server, trial], timeout=10)
        assert alive == [], "the server or its trial outlived the worker"
    finally:
        worker.kill()
        if pid_file.exists() and pid_file.read_text():
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(int(pid_file.read_text())).kill()


_CUDA_AT_IMPORT = """
import torch
torch.zeros(1, device="cuda")
from tiny import workload
"""


@pytest.mark.cuda
def test_a_workload_that_initialises_cuda_at_import_falls_back(
    workload_file, tmp_path: Path
) -> None:
    (tmp_path / "tiny.py").write_text(Path(workload_file("tiny")).read_text())
    module = tmp_path / "cuda_at_import.py"
    module.write_text(_CUDA_AT_IMPORT)
    with TrialLauncher(str(module), "cuda:0") as started:
        result = run_trial(str(module), Config(batch_size=16), "cuda:0", PLAN, 120)
    assert result.outcome == "ok", result.error
    assert started.unavailable is not None and "initialised CUDA" in started.unavailable


@pytest.mark.cuda
def test_a_forked_cuda_trial_measures(workload_file) -> None:
    workload = workload_file("tiny")
    with TrialLauncher(workload, "cuda:0") as started:
        first = run_trial(workload, Config(batch_size=16), "cuda:0", PLAN, 120)
        second = run_trial(workload, Config(batch_size=16), "cuda:0", PLAN, 120)
    assert started.unavailable is None
    assert first.outcome == second.outcome == "ok", (first.error, second.error)
    assert first.peak_memory_reserved_bytes
