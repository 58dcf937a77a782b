"""The diagnosis names the bottleneck with its numbers, and advice that fits it."""

from __future__ import annotations

from autotune.predict import LoaderPoint, Profile, StepPoint
from autotune.recommend._diagnosis import INPUT_BOUND_WAIT, TrialView, diagnose
from autotune.space import Config, DeviceInfo
from autotune.store import TrialRecord
from autotune.tuner._record import trial_row

CPU = DeviceInfo(type="cpu", name="test cpu", memory_bytes=16 * 2**30, cpu_count=8)
CUDA = DeviceInfo(
    type="cuda",
    name="test gpu",
    memory_bytes=80 * 2**30,
    index=0,
    bf16_supported=True,
    compute_capability=(9, 0),
)


def view(
    config: Config,
    outcome: str = "ok",
    samples_per_s: float | None = 100.0,
    wait: float | None = 0.05,
    peak: int | None = None,
    utilization: float | None = None,
) -> TrialView:
    return TrialView(
        config=config,
        outcome=outcome,
        samples_per_s=samples_per_s,
        data_wait_fraction=wait,
        peak_memory_bytes=peak,
        device_utilization=utilization,
    )


def test_input_bound_even_after_tuning() -> None:
    baseline = view(Config(num_workers=0), samples_per_s=200.0, wait=0.72)
    best = view(
        Config(num_workers=8, prefetch_factor=4, pin_memory=True), samples_per_s=500.0, wait=0.41
    )
    text = diagnose(baseline, best, [baseline, best], CUDA, memory_limited=False)
    assert text.startswith("Verdict: input-bound.")
    assert "72%" in text and "num_workers=0" in text
    assert "41%" in text and "num_workers=8" in text
    assert "2.50x" in text
    assert "uint8" in text and "offline" in text and "GPU" in text


def test_input_bound_on_cpu_suggests_faster_storage_not_gpu_augmentation() -> None:
    baseline = view(Config(), wait=0.9)
    best = view(Config(num_workers=2), wait=INPUT_BOUND_WAIT)
    text = diagnose(baseline, best, [baseline, best], CPU, memory_limited=False)
    assert "input-bound" in text
    assert "RAM" in text and "DALI" not in text


def test_compute_bound_after_fixing_the_loader() -> None:
    baseline = view(Config(num_workers=0), samples_per_s=100.0, wait=0.72)
    best = view(Config(num_workers=4), samples_per_s=310.0, wait=0.04)
    text = diagnose(baseline, best, [baseline, best], CPU, memory_limited=False)
    assert text.startswith("Verdict: compute-bound.")
    assert "72%" in text and "4%" in text and "num_workers=4" in text
    assert "3.10x" in text
    assert "bf16" in text  # AMP rarely pays on a CPU


def test_a_wait_without_workers_is_named_as_loading_in_the_main_process() -> None:
    """With num_workers=0 the data wait is the training thread loading each batch itself:
    "waits 27%, so the time goes to the model's own work" read as a contradiction."""
    baseline = view(Config(num_workers=0), samples_per_s=2147.0, wait=0.15)
    best = view(Config(batch_size=256, num_workers=0, amp="bf16"), samples_per_s=5399.0, wait=0.27)
    text = diagnose(baseline, best, [baseline, best], CPU, memory_limited=False)
    assert text.startswith("Verdict: compute-bound.")
    assert (
        "the recommendation (num_workers=0) loads each batch in the main process, 27% of "
        "each step, and spends the rest in the model's own work"
    ) in text
    assert "waits 27%" not in text


def test_mixed_precision_that_lost_in_the_profile_is_reported_as_measured_not_advised() -> None:
    # text-transformer's step alone on a 2-core Xeon with AMX and AVX-512 BF16 (2026-11-26):
    # bf16 runs natively there and was still slower than fp32 at every batch the profile ran.
    step = [
        StepPoint(batch_size=b, amp=amp, samples_per_s=rate)
        for amp, rates in {
            "off": {32: 560.9, 96: 639.4, 128: 563.7},
            "bf16": {32: 473.8, 96: 390.9, 128: 555.5},
        }.items()
        for b, rate in rates.items()
    ]
    profile = Profile(
        device_type="cpu",
        cpu_count=2,
        step=step,
        memory=[],
        loader=[LoaderPoint(num_workers=0, samples_per_s=26079.0, cpu_s_per_sample=4e-5)],
        loader_batch_size=32,
    )
    native = CPU.model_copy(update={"bf16_supported": True, "bf16_native": True})
    baseline = view(Config(batch_size=32), samples_per_s=508.5, wait=0.03)
    best = view(Config(batch_size=96, num_workers=4), samples_per_s=559.2, wait=0.02)
    text = diagnose(baseline, best, [baseline, best], native, memory_limited=False, profile=profile)
    assert "mixed precision does not pay for this model here" in text
    # Read on each precision's curve: fp32's lone 639 at batch 96 reads as its neighbours.
    assert "556 samples/s in bf16 against 564 in fp32" in text
    assert "would raise it" in text and "mixed precision (where" not in text
    assert "emulated" not in text and "rarely" not in text
    # Without bf16 instructions and without a profile, the CPU's lack of them is the reason.
    text = diagnose(baseline, best, [baseline, best], CPU, memory_limited=False)
    assert "no bf16 instructions" in text and "emulated" in text
    # A profile that never stepped in bf16 leaves mixed precision among what would raise it.
    fp32_only = profile.model_copy(update={"step": [p for p in step if p.amp == "off"]})
    text = diagnose(
        baseline, best, [baseline, best], native, memory_limited=False, profile=fp32_only
    )
    assert "mixed precision (where the hardware runs it natively)" in text
    assert "does not pay" not in text and "emulated" not in text


def test_compute_bound_gpu_with_low_utilization() -> None:
    baseline = view(Config(), wait=0.02, utilization=0.40)
    best = view(Config(batch_size=64, amp="bf16"), samples_per_s=180.0, wait=0.03, utilization=0.55)
    text = diagnose(baseline, best, [baseline, best], CUDA, memory_limited=False)
    assert "compute-bound" in text and "55%" in text
    assert ".item()" in text and "torch.compile" in text


def test_compute_bound_gpu_busy() -> None:
    baseline = view(Config(), wait=0.01, utilization=0.95)
    best = view(Config(amp="bf16"), samples_per_s=150.0, wait=0.01, utilization=0.98)
    text = diagnose(baseline, best, [baseline, best], CUDA, memory_limited=False)
    assert "compute-bound" in text and "98%" in text
    assert ".item()" not in text and "multiples of 8" in text


def test_memory_bound() -> None:
    baseline = view(Config(batch_size=32), samples_per_s=400.0, wait=0.01)
    oom = view(Config(batch_size=512), outcome="oom", samples_per_s=None, wait=None)
    best = view(Config(batch_size=256), samples_per_s=900.0, wait=0.01, peak=70 * 2**30)
    trials = [baseline, oom, view(Config(batch_size=1024), "oom", None, None), best]
    text = diagnose(baseline, best, trials, CUDA, memory_limited=True)
    assert text.startswith("Verdict: memory-bound.")
    assert "256" in text and "2 of 4 trials ran out of memory" in text and "512" in text
    assert "70.0 GiB" in text and "80.0 GiB" in text and "88%" in text
    assert "checkpoint" in text and "mixed precision" in text and "accumulate" in text


def test_memory_bound_by_budget_with_amp_already_on() -> None:
    baseline = view(Config(batch_size=32))
    best = view(Config(batch_size=128, amp="bf16"), samples_per_s=300.0)
    text = diagnose(baseline, best, [baseline, best], CUDA, memory_limited=True)
    assert "memory-bound" in text and "memory budget" in text
    assert "enable mixed precision" not in text


def test_failed_baseline() -> None:
    baseline = view(Config(batch_size=1024), outcome="oom", samples_per_s=None, wait=None)
    best = view(Config(batch_size=256), samples_per_s=900.0, wait=0.02)
    text = diagnose(baseline, best, [baseline, best], CPU, memory_limited=False)
    assert "compute-bound" in text
    assert "baseline ran out of memory" in text and "900 samples/s" in text
    assert "2% of each step" in text


def test_deterministic() -> None:
    baseline = view(Config(), wait=0.5)
    best = view(Config(num_workers=4), wait=0.1)
    first = diagnose(baseline, best, [baseline, best], CUDA, memory_limited=False)
    assert all(
        diagnose(baseline, best, [baseline, best], CUDA, memory_limited=False) == first
        for _ in range(3)
    )


def test_view_of_a_stored_trial() -> None:
    config = Config(batch_size=64, num_workers=2)
    record = TrialRecord(
        config=config,
        outcome="ok",
        samples_per_s=10.0,
        data_wait_fraction=0.1,
        peak_host_memory_bytes=2**20,
    )
    row = trial_row(1, 1, "search", record, None)
    assert TrialView.of(TrialRecord.model_validate(row)) == TrialView(
        config.normalized(), "ok", 10.0, 0.1, 2**20, None
    )
