"""CUDA-only behaviour: skipped without a CUDA device (run them where one is lent)."""

from __future__ import annotations

import pytest
import torch

from autotune.measure import MeasurePlan, device_uuid
from autotune.runner import probe_workload, run_trial
from autotune.space import Config, SearchSpace
from tests.conftest import FAST

pytestmark = pytest.mark.cuda
PLAN = MeasurePlan(**FAST)


def _cuda_trial(path: str, config: Config, **kwargs: object) -> object:
    return run_trial(
        path,
        config,
        "cuda:0",
        PLAN,
        120,
        budget_is_host_memory=False,
        device_uuid=device_uuid(torch.device("cuda:0")),
        **kwargs,
    )


def test_cuda_knobs_are_searched_on_a_gpu(workload_file) -> None:
    probe = probe_workload(workload_file("four_d"), "cuda:0")
    space = SearchSpace(probe.device, probe.workload)
    for knob in ("pin_memory", "device_prefetch", "cudnn_benchmark", "channels_last"):
        assert knob in space.searched, knob
    assert "fp16" in space.choices["amp"]


@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_amp_trains_finitely_with_device_memory_recorded(workload_file, amp: str) -> None:
    if amp == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bf16")
    config = Config(
        batch_size=64,
        num_workers=2,
        pin_memory=True,
        device_prefetch=True,
        amp=amp,
        channels_last=True,
        cudnn_benchmark=True,
    )
    result = _cuda_trial(workload_file("four_d"), config)
    assert result.outcome == "ok", result.error
    assert result.losses_finite is True
    assert result.peak_memory_allocated_bytes > 0
    assert result.peak_memory_reserved_bytes >= result.peak_memory_allocated_bytes
    assert result.fingerprint["cuda"]


def test_device_budget_gives_a_real_cuda_oom(workload_file) -> None:
    result = _cuda_trial(
        workload_file("memory_hog"), Config(batch_size=512), memory_budget_bytes=64 * 2**20
    )
    assert result.outcome == "oom", result.error


def test_nvml_utilisation_is_sampled_when_available(workload_file) -> None:
    pytest.importorskip("pynvml")
    result = _cuda_trial(workload_file("four_d"), Config(batch_size=64))
    assert result.outcome == "ok", result.error
    assert result.device_utilization is None or 0.0 <= result.device_utilization <= 100.0


def test_a_trial_process_sees_only_the_gpu_it_tunes(workload_file) -> None:
    checks = workload_file("process_checks")
    result = _cuda_trial(f"{checks}:visible_devices", Config(batch_size=8))
    assert result.outcome == "error"
    assert result.error == "RuntimeError: visible='0' count=1"


def test_the_probe_records_the_gpu_the_trials_run_on() -> None:
    last = torch.cuda.device_count() - 1
    probe = probe_workload("builtin:image-cnn", f"cuda:{last}")
    props = torch.cuda.get_device_properties(last)
    assert probe.device.index == last
    assert probe.device.name == props.name
    assert probe.device.memory_bytes == props.total_memory
    assert probe.device_uuid == device_uuid(torch.device("cuda", last))
