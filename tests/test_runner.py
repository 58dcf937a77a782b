"""Every trial outcome, produced by a real workload failing in a real subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from autotune.errors import ConfigError, WorkloadError
from autotune.measure import MeasurePlan
from autotune.runner import (
    DEFAULT_HOST_MEMORY_SHARE,
    default_host_memory_cap,
    probe_workload,
    run_trial,
    trial_device,
)
from autotune.runner import _process as process_module
from autotune.space import Config
from tests.conftest import FAST

PLAN = MeasurePlan(**FAST)


def _run(path: str, config: Config | None = None, **kwargs: object) -> object:
    timeout = kwargs.pop("timeout_s", 60)
    return run_trial(path, config or Config(batch_size=16), "cpu", PLAN, timeout, **kwargs)


@pytest.mark.slow
def test_ok_trial_records_every_metric(workload_file) -> None:
    result = _run(workload_file("tiny"), Config(batch_size=16, num_workers=2, prefetch_factor=2))
    assert result.outcome == "ok", result.error
    assert result.samples_per_s > 0
    assert result.steps >= FAST["min_steps"]
    assert result.window_s >= FAST["min_seconds"]
    assert result.warmup_steps >= 3  # at least one step per worker, plus one
    assert 0.0 <= result.data_wait_fraction <= 1.0
    assert result.step_time_p90_ms >= result.step_time_median_ms > 0
    assert result.losses_finite is True
    # Whole process tree: the trial and its two workers hold well over an idle interpreter.
    assert result.peak_host_memory_bytes > 50 * 2**20
    assert result.fingerprint["torch"] and result.fingerprint["cpu_count"] >= 1


@pytest.mark.slow
def test_workload_error_is_reported_in_its_own_words(workload_file) -> None:
    result = _run(workload_file("raises"))
    assert result.outcome == "error"
    assert result.error == "ValueError: shape mismatch in my_layer: expected 16 features"


@pytest.mark.slow
def test_error_in_a_loader_worker_keeps_the_original_message(workload_file) -> None:
    result = _run(workload_file("raises"), Config(batch_size=16, num_workers=1))
    assert result.outcome == "error"
    assert "shape mismatch in my_layer" in result.error


@pytest.mark.slow
def test_nan_loss_is_nonfinite(workload_file) -> None:
    result = _run(workload_file("nan_loss"))
    assert result.outcome == "nonfinite"
    assert "NaN" in result.error


@pytest.mark.slow
def test_segfault_is_crashed_with_its_signal(workload_file) -> None:
    result = _run(workload_file("crash"))
    assert result.outcome == "crashed"
    assert result.signal == "SIGSEGV"
    assert "SIGSEGV" in result.error


@pytest.mark.slow
def test_hang_is_timeout_and_leaves_no_process_behind(workload_file) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = _run(workload_file("hang"), Config(batch_size=16, num_workers=2), timeout_s=6)
    assert result.outcome == "timeout"
    assert "6 s timeout" in result.error
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before


@pytest.mark.slow
def test_memory_budget_on_cpu_is_oom(workload_file) -> None:
    budget = 500 * 2**20
    result = _run(workload_file("memory_hog"), Config(batch_size=256), memory_budget_bytes=budget)
    assert result.outcome == "oom"
    assert "over the memory budget" in result.error
    assert result.peak_host_memory_bytes > budget


@pytest.mark.slow
def test_without_a_budget_host_memory_is_still_capped(
    workload_file, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The default cap is a share of the memory available; shrink the share so that 400 MiB of
    # this machine's available memory is the cap, and push a real trial past it.
    cap = 400 * 2**20
    monkeypatch.setattr(
        process_module, "DEFAULT_HOST_MEMORY_SHARE", cap / psutil.virtual_memory().available
    )
    # budget_is_host_memory=False is the CUDA case: the budget caps the device, not the host.
    for kwargs in ({}, {"memory_budget_bytes": 2**40, "budget_is_host_memory": False}):
        result = _run(workload_file("memory_hog"), Config(batch_size=512), **kwargs)
        assert result.outcome == "oom", result.error
        assert "over the default cap" in result.error and "--max-memory" in result.error
        assert not result.usable


def test_default_host_memory_cap_is_the_documented_share_of_available_memory() -> None:
    available = psutil.virtual_memory().available
    assert 0 < DEFAULT_HOST_MEMORY_SHARE < 1
    assert default_host_memory_cap() == pytest.approx(
        DEFAULT_HOST_MEMORY_SHARE * available, rel=0.05
    )


@pytest.mark.slow
def test_a_sigkill_we_did_not_send_far_below_the_cap_is_a_crash(workload_file) -> None:
    result = _run(workload_file("process_checks") + ":sigkill")
    assert result.outcome == "crashed"
    assert result.signal == "SIGKILL" and "killed by SIGKILL" in result.error


@pytest.mark.parametrize(
    ("returncode", "peak", "kills", "by_kernel"),
    [
        (-9, 950, None, True),  # SIGKILL with the last reading within 10% of the cap
        (-9, 500, None, False),  # SIGKILL far below the cap, no counter: a crash
        (-9, 500, 1, True),  # the cgroup counted an OOM kill while the trial ran
        (-9, 500, 0, False),
        (-11, 990, 1, False),  # a segfault is never the OOM killer
        (1, 990, 1, False),
    ],
)
def test_what_counts_as_a_kernel_oom_kill(
    returncode: int, peak: int, kills: int | None, by_kernel: bool
) -> None:
    memory = process_module._HostMemory(peak_bytes=peak, cap_bytes=1000, kernel_oom_kills=kills)
    assert memory.killed_by_kernel(returncode) is by_kernel


_OOM_HELPER = """
import json, sys
with open(sys.argv[1] + "/cgroup.procs", "w") as procs:  # this process and its children
    procs.write("0")
from autotune.measure import MeasurePlan
from autotune.runner import run_trial
from autotune.space import Config
record = run_trial(sys.argv[2], Config(batch_size=1024), "cpu", MeasurePlan(**json.loads(
    sys.argv[3])), 120)
print(record.model_dump_json())
"""


@pytest.fixture
def small_memory_cgroup() -> Iterator[Path]:
    """A memory cgroup of 600 MiB below this process's own, where the kernel OOM-kills."""
    own = next(
        (
            line.split(":", 2)
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line.split(":", 2)[1] in ("memory", "")
        ),
        None,
    )
    if own is None:
        pytest.skip("no memory cgroup for this process")
    v1 = own[1] == "memory"
    parent = Path("/sys/fs/cgroup") / ("memory" if v1 else "") / own[2].lstrip("/")
    group = parent / f"autotune-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        limit = "memory.limit_in_bytes" if v1 else "memory.max"
        (group / limit).write_text(str(600 * 2**20))
    except OSError as exc:
        if group.exists():
            group.rmdir()
        pytest.skip(f"cannot create a memory cgroup here ({exc}); run as root with cgroups")
    try:
        yield group
    finally:
        group.rmdir()


@pytest.mark.slow
def test_a_kernel_oom_kill_is_oom(workload_file, small_memory_cgroup: Path) -> None:
    # A real kernel OOM kill: the trial runs in a cgroup of 600 MiB and loads a 1 GiB batch.
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _OOM_HELPER,
            str(small_memory_cgroup),
            workload_file("memory_hog"),
            json.dumps(FAST),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=True,
    )
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["outcome"] == "oom", record["error"]
    assert "kernel's out-of-memory killer" in record["error"]
    assert record["signal"] == "SIGKILL"


@pytest.mark.slow
def test_same_workload_fits_a_small_batch_under_the_budget(workload_file) -> None:
    budget = 500 * 2**20
    result = _run(workload_file("memory_hog"), Config(batch_size=8), memory_budget_bytes=budget)
    assert result.outcome == "ok", result.error
    assert result.peak_host_memory_bytes <= budget


@pytest.mark.slow
def test_probe_learns_dataset_and_input_shape(workload_file) -> None:
    probe = probe_workload(workload_file("four_d"), "cpu")
    assert probe.workload.input_batch_ndim == 4
    assert probe.workload.dataset_length == 512
    assert probe.device.type == "cpu"
    flat = probe_workload(workload_file("tiny"), "cpu")
    assert flat.workload.input_batch_ndim == 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("stem", "phrase"),
    [
        ("import_error", "failed to import: ModuleNotFoundError"),
        ("no_function", "has no function 'workload'"),
        ("bad_return", "returned int, expected autotune.Workload"),
    ],
)
def test_probe_refuses_a_broken_workload_with_one_clear_sentence(
    workload_file, stem: str, phrase: str
) -> None:
    with pytest.raises(WorkloadError) as caught:
        probe_workload(workload_file(stem), "cpu")
    assert phrase in str(caught.value)
    assert "\n" not in str(caught.value)


# -- one device per trial --------------------------------------------------------------------


@pytest.mark.slow
def test_a_cpu_trial_process_sees_no_gpu(workload_file) -> None:
    result = _run(workload_file("process_checks") + ":visible_devices")
    assert result.outcome == "error"
    assert result.error == "RuntimeError: visible='' count=0"


@pytest.mark.slow
def test_a_cuda_trial_process_is_shown_only_its_gpu(
    workload_file, monkeypatch: pytest.MonkeyPatch
) -> None:
    # cuda:1 of a process that sees two GPUs (by UUID) is the second one, shown to the trial
    # alone. These GPUs do not exist, so the trial process says what it was shown and stops.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0000aaaa,GPU-0000bbbb")
    result = run_trial(workload_file("tiny"), Config(batch_size=16), "cuda:1", PLAN, 60)
    assert result.outcome == "error"
    assert "--device cuda:1" in result.error
    assert "CUDA_VISIBLE_DEVICES='GPU-0000bbbb'" in result.error
    with pytest.raises(WorkloadError, match="CUDA_VISIBLE_DEVICES='GPU-0000bbbb'"):
        probe_workload(workload_file("tiny"), "cuda:1")


@pytest.mark.parametrize(
    ("requested", "inherited", "device", "visible", "index"),
    [
        ("cpu", None, "cpu", "", None),
        ("cpu", "0,1", "cpu", "", None),
        ("cuda", None, "cuda:0", "0", 0),
        ("cuda:3", None, "cuda:0", "3", 3),
        ("cuda:1", "4,6", "cuda:0", "6", 1),
        ("cuda:0", "GPU-aa, GPU-bb", "cuda:0", "GPU-aa", 0),
        ("auto", None, "auto", "0", 0),
        ("auto", "5,2", "auto", "5", 0),
        ("auto", "", "auto", "", None),
    ],
)
def test_trial_device_names_one_gpu(
    requested: str, inherited: str | None, device: str, visible: str, index: int | None
) -> None:
    environ = {} if inherited is None else {"CUDA_VISIBLE_DEVICES": inherited}
    target = trial_device(requested, environ)
    assert (target.device, target.visible_devices, target.requested_index) == (
        device,
        visible,
        index,
    )
    assert target.environment() == {"CUDA_VISIBLE_DEVICES": visible}


def test_a_gpu_index_beyond_the_visible_ones_is_refused_in_one_sentence() -> None:
    with pytest.raises(ConfigError, match=r"makes only 2 GPU\(s\) visible; pick an index"):
        trial_device("cuda:2", {"CUDA_VISIBLE_DEVICES": "0,1"})


@pytest.mark.slow
def test_a_trial_process_dies_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    # A stand-in for a worker starts a process that arms the trial's parent-death signal and
    # then sleeps, as a trial hung in its loader would; the stand-in is then SIGKILLed alone.
    grandchild_pid = tmp_path / "trial.pid"
    trial_code = (
        "import os, sys, time; from autotune.runner._child import die_with_parent; "
        "die_with_parent(); "
        f"open({str(grandchild_pid)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    )
    worker_code = (
        "import os, subprocess, sys, time; "
        "env = dict(os.environ, AUTOTUNE_TRIAL_PARENT_PID=str(os.getpid())); "
        f"subprocess.Popen([sys.executable, '-c', {trial_code!r}], env=env, "
        "start_new_session=True); time.sleep(120)"
    )
    worker = subprocess.Popen([sys.executable, "-c", worker_code])
    try:
        deadline = 60.0
        while not grandchild_pid.exists() or not grandchild_pid.read_text():
            assert worker.poll() is None, "the stand-in worker exited early"
            deadline -= 0.1
            assert deadline > 0, "the trial process never started"
            time.sleep(0.1)
        trial = psutil.Process(int(grandchild_pid.read_text()))
        worker.kill()
        worker.wait(10)
        _, alive = psutil.wait_procs([trial], timeout=10)
        assert alive == [], "the trial process outlived the process that started it"
    finally:
        worker.kill()
        if grandchild_pid.exists() and grandchild_pid.read_text():
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(int(grandchild_pid.read_text())).kill()
