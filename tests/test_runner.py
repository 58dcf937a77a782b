"""Every trial outcome, produced by a real workload failing in a real subprocess."""

from __future__ import annotations

import psutil
import pytest

from autotune.errors import WorkloadError
from autotune.measure import MeasurePlan
from autotune.runner import probe_workload, run_trial
from autotune.space import Config
from tests.conftest import FAST

PLAN = MeasurePlan(**FAST)


def _run(path: str, config: Config | None = None, **kwargs: object) -> object:
    timeout = kwargs.pop("timeout_s", 60)
    return run_trial(path, config or Config(batch_size=16), "cpu", PLAN, timeout, **kwargs)


def test_ok_trial_records_every_metric(workload_file) -> None:
    result = _run(workload_file("tiny"), Config(batch_size=16, num_workers=2, prefetch_factor=2))
    assert result.outcome == "ok", result.error
    metrics = result.metrics
    assert metrics["samples_per_s"] > 0
    assert metrics["steps"] >= FAST["min_steps"]
    assert metrics["window_s"] >= FAST["min_seconds"]
    assert metrics["warmup_steps"] >= 3  # at least one step per worker, plus one
    assert 0.0 <= metrics["data_wait_fraction"] <= 1.0
    assert metrics["step_time_p90_ms"] >= metrics["step_time_median_ms"] > 0
    assert metrics["losses_finite"] is True
    # Whole process tree: the trial and its two workers hold well over an idle interpreter.
    assert result.peak_host_memory_bytes > 50 * 2**20
    assert result.fingerprint["torch"] and result.fingerprint["cpu_count"] >= 1


def test_workload_error_is_reported_in_its_own_words(workload_file) -> None:
    result = _run(workload_file("raises"))
    assert result.outcome == "error"
    assert result.error == "ValueError: shape mismatch in my_layer: expected 16 features"


def test_error_in_a_loader_worker_keeps_the_original_message(workload_file) -> None:
    result = _run(workload_file("raises"), Config(batch_size=16, num_workers=1))
    assert result.outcome == "error"
    assert "shape mismatch in my_layer" in result.error


def test_nan_loss_is_nonfinite(workload_file) -> None:
    result = _run(workload_file("nan_loss"))
    assert result.outcome == "nonfinite"
    assert "NaN" in result.error


def test_segfault_is_crashed_with_its_signal(workload_file) -> None:
    result = _run(workload_file("crash"))
    assert result.outcome == "crashed"
    assert result.signal == "SIGSEGV"
    assert "SIGSEGV" in result.error


def test_hang_is_timeout_and_leaves_no_process_behind(workload_file) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = _run(workload_file("hang"), Config(batch_size=16, num_workers=2), timeout_s=6)
    assert result.outcome == "timeout"
    assert "6 s timeout" in result.error
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before


def test_memory_budget_on_cpu_is_oom(workload_file) -> None:
    budget = 500 * 2**20
    result = _run(workload_file("memory_hog"), Config(batch_size=256), memory_budget_bytes=budget)
    assert result.outcome == "oom"
    assert "over the memory budget" in result.error
    assert result.peak_host_memory_bytes > budget


def test_same_workload_fits_a_small_batch_under_the_budget(workload_file) -> None:
    budget = 500 * 2**20
    result = _run(workload_file("memory_hog"), Config(batch_size=8), memory_budget_bytes=budget)
    assert result.outcome == "ok", result.error
    assert result.peak_host_memory_bytes <= budget


def test_probe_learns_dataset_and_input_shape(workload_file) -> None:
    probe = probe_workload(workload_file("four_d"), "cpu")
    assert probe.workload.input_batch_ndim == 4
    assert probe.workload.dataset_length == 512
    assert probe.device.type == "cpu"
    flat = probe_workload(workload_file("tiny"), "cpu")
    assert flat.workload.input_batch_ndim == 2


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
