"""The calibration classes depend on the device: on a CUDA device the host heap's handling of
freed memory (``retain_freed_memory``, a glibc knob) splits no scale, on a CPU it does."""

from __future__ import annotations

import pytest

# The devices and the workload the predictor's own tests use.
from test_predict import CPU, GPU, TOKENS

from autotune.predict import LoaderPoint, Profile, StepPoint
from autotune.space import Config, DeviceInfo, SearchSpace
from autotune.tuner._calibration import ScaleClass, covered_ratios, measured_scales
from autotune.tuner._predictor import Predictor


def predictor_on(device: DeviceInfo) -> Predictor:
    """Batch 32 or 64 in fp32, loading in the main process or with two workers."""
    profile = Profile(
        device_type=device.type,
        cpu_count=device.cpu_count,
        step=[
            StepPoint(batch_size=b, amp="off", samples_per_s=r, peak_memory_bytes=2**28)
            for b, r in ((32, 1000.0), (64, 2000.0))
        ],
        loader=[
            LoaderPoint(num_workers=w, samples_per_s=1e6, cpu_s_per_sample=1e-4) for w in (0, 2)
        ],
        memory=[],
        loader_batch_size=32,
        sample_bytes=1024,
    )
    return Predictor(profile, SearchSpace(device, TOKENS), None)


#: Runs in the main process that differ in retain_freed_memory, and one with workers.
RETAINED = Config(batch_size=32, retain_freed_memory=True)
DEFAULTS = Config(batch_size=64)
WORKERS = Config(batch_size=64, num_workers=2)
RETAINED64 = Config(batch_size=64, retain_freed_memory=True)


def calibrated_on(
    device: DeviceInfo,
) -> tuple[Predictor, list[tuple[Config, float]], dict[ScaleClass, float]]:
    """The predictor on ``device``, the three runs at 0.9, 0.5 and 0.7 of their predictions,
    and the scales they give; asserts whether the device's classes split by the heap."""
    predictor = predictor_on(device)
    apart = ScaleClass.of(RETAINED, device.type) != ScaleClass.of(
        RETAINED.model_copy(update={"retain_freed_memory": False}), device.type
    )
    assert apart == (not device.is_cuda)
    shares = [(RETAINED, 0.9), (DEFAULTS, 0.5), (WORKERS, 0.7)]
    measured = [(c, share * (predictor.samples_per_s(c) or 0.0)) for c, share in shares]
    return predictor, measured, measured_scales(covered_ratios(predictor.profile, measured))


def test_a_cuda_job_s_calibration_does_not_split_by_the_host_heap() -> None:
    predictor, measured, scales = calibrated_on(GPU)
    # One scale per side of loading: the main-process runs' median, whatever their heap.
    assert scales == {
        ScaleClass(None, True): pytest.approx(0.7),
        ScaleClass(None, False): pytest.approx(0.7),
    }
    assert predictor.scale(RETAINED64, measured) == pytest.approx(0.7)
    # Its own run left out, the retained run in the main process tells its scale.
    assert predictor.scale(DEFAULTS, measured) == pytest.approx(0.9)


def test_a_cpu_job_s_calibration_splits_by_the_host_heap() -> None:
    predictor, measured, scales = calibrated_on(CPU)
    assert scales == {
        ScaleClass(True, True): pytest.approx(0.9),
        # No retained run with workers: the retained heap's scale.
        ScaleClass(True, False): pytest.approx(0.9),
        ScaleClass(False, True): pytest.approx(0.5),
        ScaleClass(False, False): pytest.approx(0.7),
    }
    assert predictor.scale(RETAINED64, measured) == pytest.approx(0.9)
    # Its own run left out, no other with glibc's defaults in the main process: the heap's.
    assert predictor.scale(DEFAULTS, measured) == pytest.approx(0.7)
