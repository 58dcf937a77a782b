"""What the measurement's numbers mean: data wait, warm-up, epoch restarts, TF32, NVML, and
the one step shared by the measured loop and ``load_recommendation``.

Trials are real subprocesses on real workloads from tests/workloads/.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from autotune.measure import (
    MeasurePlan,
    NonFiniteLoss,
    TrainingLoop,
    UtilizationSampler,
    apply_backend_flags,
    measure,
)
from autotune.recommend import Recommendation, TrialView, diagnose
from autotune.runner import run_trial
from autotune.space import Config, DeviceInfo
from autotune.store import TrialRecord
from autotune.workload import Workload, load_workload
from autotune.workload.builtins._slow_storage import READ_LATENCY_S

PLAN = MeasurePlan(warmup_steps=1, min_steps=5, min_seconds=0.5)
GPU_UUID = "GPU-5e1f0c3a-8f8e-4b0e-9d1e-2a6c0b7d9e11"
GPU = DeviceInfo(
    type="cuda",
    name="A100",
    memory_bytes=40 * 2**30,
    index=0,
    uuid=GPU_UUID,
    compute_capability=(8, 0),
)
cuda = pytest.mark.cuda


def _trial(path: str, config: Config, device: str = "cpu") -> TrialRecord:
    result = run_trial(path, config, device, PLAN, timeout_s=120)
    assert result.outcome == "ok", result.error
    return result


# -- 2. waiting for data means waiting for the loader -------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
def test_compute_heavy_model_on_free_data_barely_waits(workload_file: Any, device: str) -> None:
    # On a GPU the loader's next() runs while the device computes the steps already queued:
    # that time is not a wait. (compute_heavy's step is too small to keep an H100 busy.)
    name, batch = ("compute_heavy", 64) if device == "cpu" else ("gpu_heavy", 256)
    result = _trial(workload_file(name), Config(batch_size=batch), device)
    assert result.data_wait_fraction < 0.1


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
@pytest.mark.parametrize("workers", [0, 2])
def test_sleeping_dataset_mostly_waits(workload_file: Any, device: str, workers: int) -> None:
    result = _trial(workload_file("sleepy"), Config(batch_size=8, num_workers=workers), device)
    assert result.data_wait_fraction > 0.5


@pytest.mark.slow
@cuda
def test_cuda_step_times_come_from_the_device(workload_file: Any) -> None:
    # A pageable copy waits for the device; that wait is the copy's, not the loader's.
    result = _trial(workload_file("gpu_heavy"), Config(batch_size=256), "cuda")
    assert result.data_wait_fraction is not None and result.data_wait_fraction < 0.1
    assert result.step_time_median_ms is not None and result.step_time_p90_ms is not None
    assert 0 < result.step_time_median_ms <= result.step_time_p90_ms
    assert result.copy_wait_fraction is not None and result.copy_wait_fraction >= 0


@pytest.mark.slow
def test_cpu_has_no_copy_wait(workload_file: Any) -> None:
    result = _trial(workload_file("tiny"), Config(batch_size=16))
    assert result.copy_wait_fraction < 0.05


# -- 7. a representative window -----------------------------------------------------------------


@pytest.mark.slow
def test_warm_up_outlasts_the_workers_start_up_backlog(workload_file: Any) -> None:
    config = Config(batch_size=16, num_workers=2, prefetch_factor=4)
    result = _trial(workload_file("tiny"), config)
    # Two workers queue 2 x 4 batches before the first step; those are not steady state.
    assert result.warmup_steps >= 2 * 4 + 1


@pytest.mark.slow
def test_a_short_window_never_reads_faster_than_the_workers_can_deliver() -> None:
    # Workers started together deliver a batch each per round. Three steps right after a
    # round's burst wait for nothing; read as the steady state, with an epoch's start
    # amortised on top, they reported 2.5-2.9x what the loader can deliver (2026-11-22).
    workers, batch = 4, 256  # 16 steps an epoch; a worker's batch takes 256 x 4 ms
    ceiling = workers / READ_LATENCY_S  # samples/s: each worker reads one sample at a time
    short = MeasurePlan(warmup_steps=2, min_steps=3, min_seconds=1.0)  # the benchmarks' plan
    result = run_trial(
        "builtin:slow-storage", Config(batch_size=batch, num_workers=workers), "cpu", short, 120
    )
    assert result.outcome == "ok", result.error
    assert result.steps_per_epoch == 16
    assert 0.6 * ceiling <= result.samples_per_s <= 1.05 * ceiling, (result.samples_per_s, ceiling)


@pytest.mark.slow
def test_epoch_restart_is_measured_and_amortised(workload_file: Any) -> None:
    path = workload_file("slow_worker_start")
    fresh = _trial(path, Config(batch_size=16, num_workers=1))
    kept = _trial(path, Config(batch_size=16, num_workers=1, persistent_workers=True))
    assert fresh.steps_per_epoch == kept.steps_per_epoch == 256 // 16
    # Without persistent workers every epoch starts a worker that sleeps 0.5 s in its init.
    assert fresh.epoch_restart_s >= 0.4
    assert kept.epoch_restart_s < 0.2
    # 0.5 s over 16 steps of a tiny model: persistent workers are judged as they matter.
    assert kept.samples_per_s > 1.5 * fresh.samples_per_s


@pytest.mark.slow
def test_an_epochs_start_counts_the_step_that_copies_what_its_new_workers_share(
    workload_file: Any,
) -> None:
    # Each step writes a 384 MiB buffer the process keeps. Workers forked at an epoch's start
    # share its pages copy-on-write, so the epoch's first step copies 98,304 pages (2 us and
    # more each on the machines seen): the epoch start's cost, though nothing waits for data.
    # A 256-step epoch: the window holds no start, so one is started after it and timed.
    path = workload_file("written_heap")
    fresh = _trial(path, Config(batch_size=16, num_workers=1))
    kept = _trial(path, Config(batch_size=16, num_workers=1, persistent_workers=True))
    assert fresh.steps_per_epoch == kept.steps_per_epoch == 256
    assert fresh.epoch_restart_s >= 0.15, fresh.epoch_restart_s
    assert kept.epoch_restart_s < 0.1 * fresh.epoch_restart_s
    # It is work, not a wait: the data-wait share does not take it.
    assert fresh.data_wait_fraction < 0.3


@pytest.mark.slow
def test_a_short_epoch_is_timed_whole_with_its_start(workload_file: Any) -> None:
    path = workload_file("slow_worker_start")
    result = _trial(path, Config(batch_size=64, num_workers=1))
    assert result.steps_per_epoch == 256 // 64 and result.steps % result.steps_per_epoch == 0
    # Each epoch starts a worker that sleeps 0.5 s first: 256 samples take longer than that.
    assert result.samples_per_s < 256 / 0.5
    assert result.epoch_restart_s >= 0.4


@pytest.mark.slow
def test_a_window_of_whole_epochs_reports_its_rate_at_epochs_ends_only(workload_file: Any) -> None:
    # Pruning compares the rate so far with the best: mid-epoch it holds the epoch's start
    # (here a worker that sleeps 0.5 s) without the steps that repay it. On slow-storage (48
    # workers, 85 batches an epoch, 2 cores) a trial read 2,813 samples/s one epoch into its
    # window and was pruned below half of 6,607; measured whole, the same configuration ran at
    # 7,700.
    workload = load_workload(workload_file("slow_worker_start"))
    plan = MeasurePlan(warmup_steps=1, min_steps=12, min_seconds=2.0, progress_interval_s=0.0)
    events: list[dict[str, Any]] = []
    result = measure(
        workload,
        Config(batch_size=64, num_workers=1),
        torch.device("cpu"),
        plan,
        progress=events.append,
    )
    in_window = [e for e in events if e["event"] == "progress" and not e.get("warmup")]
    assert result.steps_per_epoch == 4 and len(in_window) >= 2
    assert all(e["steps"] % 4 == 0 for e in in_window), [e["steps"] for e in in_window]


class _CountedReads(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Counts the samples read (in the main process: no workers)."""

    def __init__(self, length: int) -> None:
        self.length, self.reads = length, 0

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.reads += 1
        return torch.ones(16), torch.tensor(index % 4)


def test_a_window_of_whole_epochs_starts_where_the_warm_up_ended() -> None:
    # Any run of an epoch's count of steps holds one epoch's start; waiting for the next epoch
    # to begin cost up to an epoch of untimed steps (15 of 1 s each on text-transformer).
    dataset = _CountedReads(13 * 8)  # 13 steps an epoch at batch 8
    workload = Workload(
        model=lambda: torch.nn.Linear(16, 4),
        dataset=lambda: dataset,
        loss=torch.nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name="counted-reads",
        batch_size=8,
    )
    plan = MeasurePlan(warmup_steps=2, min_steps=13, min_seconds=0.0, max_warmup_s=0.0)
    result = measure(workload, Config(batch_size=8), torch.device("cpu"), plan)
    assert result.steps_per_epoch == 13 and result.steps == 13
    assert result.warmup_steps % 13, "the warm-up ends mid-epoch"
    assert dataset.reads == 8 * (result.warmup_steps + result.steps)


def test_one_whole_epoch_that_outlasts_the_window_is_enough(workload_file: Any) -> None:
    # Fewer steps an epoch than min_steps: a second epoch would only lengthen the window
    # (text-transformer at batch 512 on 2 cores: 8 steps of 1.7 s, and 14 s more per window).
    workload = load_workload(workload_file("slow_worker_start"))
    plan = MeasurePlan(warmup_steps=1, min_steps=12, min_seconds=0.3)
    result = measure(workload, Config(batch_size=64, num_workers=1), torch.device("cpu"), plan)
    assert result.steps_per_epoch == 4
    assert result.steps == 4, "each epoch's worker sleeps 0.5 s: one epoch outlasts 0.3 s"


def test_the_full_collection_that_setting_up_left_due_runs_before_the_first_batch(
    workload_file: Any,
) -> None:
    # Python's collector runs a full collection once the objects that survived since the last
    # one reach a quarter of those it held then. Building the model, the optimizer and the
    # loader leaves such survivors, so with torch imported a walk of some 350,000 objects
    # (0.2-0.3 s on a 2-core CPU) falls due some seconds into the process: inside a short
    # window, where DataLoader workers forked meanwhile inherit it too. It must run before the
    # first batch is read (before any worker starts): run between the warm-up and the window,
    # its pause let the workers queue batches that the window then took for free.
    events: list[str] = []

    def on_collection(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            events.append("full collection")

    tiny = load_workload(workload_file("tiny"))

    class ReadsLogged(torch.utils.data.Dataset[Any]):
        def __init__(self) -> None:
            self.samples = tiny.dataset()

        def __len__(self) -> int:
            return len(self.samples)  # type: ignore[arg-type]

        def __getitem__(self, index: int) -> Any:
            if events[-1:] != ["read"]:
                events.append("read")
            return self.samples[index]

    workload = dataclasses.replace(tiny, dataset=ReadsLogged)
    plan = MeasurePlan(warmup_steps=1, min_steps=5, min_seconds=0.01)
    gc.callbacks.append(on_collection)
    try:
        measure(
            workload,
            Config(batch_size=16),
            torch.device("cpu"),
            plan,
            progress=lambda event: events.append(event["event"]),
        )
    finally:
        gc.callbacks.remove(on_collection)
    assert events[events.index("read") - 1] == "full collection", events
    assert "full collection" not in events[events.index("warmed_up") :], events


# -- 1. the baseline is what the user runs: TF32 left alone unless set ---------------------------


@pytest.fixture
def restore_tf32() -> Iterator[None]:
    matmul = torch.backends.cuda.matmul.fp32_precision
    conv = torch.backends.cudnn.conv.fp32_precision  # type: ignore[attr-defined]
    benchmark = torch.backends.cudnn.benchmark
    yield
    torch.backends.cuda.matmul.fp32_precision = matmul
    torch.backends.cudnn.conv.fp32_precision = conv  # type: ignore[attr-defined]
    torch.backends.cudnn.benchmark = benchmark


def _tf32_flags() -> tuple[str, str]:
    return (torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision)  # type: ignore[attr-defined]


@pytest.mark.usefixtures("restore_tf32")
def test_unset_tf32_leaves_pytorch_and_the_user_alone() -> None:
    # Setting the flags needs no GPU; only the device's type decides that they apply.
    device = torch.device("cuda")
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # what the user's script chose
    torch.backends.cudnn.conv.fp32_precision = "ieee"  # type: ignore[attr-defined]
    apply_backend_flags(Config(tf32=None), device)
    assert _tf32_flags() == ("tf32", "ieee")
    apply_backend_flags(Config(tf32=True), device)
    assert _tf32_flags() == ("tf32", "tf32")
    apply_backend_flags(Config(tf32=False), device)
    assert _tf32_flags() == ("ieee", "ieee")


@pytest.mark.usefixtures("restore_tf32")
def test_backend_flags_do_nothing_on_a_cpu() -> None:
    before = _tf32_flags()
    apply_backend_flags(Config(tf32=True, cudnn_benchmark=True), torch.device("cpu"))
    assert _tf32_flags() == before


# -- 3 and 4. GPU utilisation: a fraction, of the GPU named by its UUID -------------------------


class _Rates:
    def __init__(self, gpu: int) -> None:
        self.gpu = gpu


class _TwoGpuNvml:
    """NVML's Python API on a machine with two GPUs whose NVML ordinals are the reverse of
    CUDA's: only the UUID finds the GPU being tuned. (No GPU here: the real library runs in
    the ``cuda``-marked test below.)"""

    def __init__(self) -> None:
        self.busy_percent = {GPU_UUID: 73, "GPU-other": 5}
        self.by_index = ["GPU-other", GPU_UUID]

    def nvmlDeviceGetHandleByUUID(self, uuid: bytes) -> str:  # noqa: N802 - NVML's name
        name = uuid.decode()
        if name not in self.busy_percent:
            raise LookupError(name)
        return name

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:  # noqa: N802 - NVML's name
        return self.by_index[index]

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> _Rates:  # noqa: N802
        return _Rates(self.busy_percent[handle])


def test_utilisation_is_a_fraction_of_the_gpu_named_by_uuid() -> None:
    sampler = UtilizationSampler(GPU.nvml_id, nvml=_TwoGpuNvml())
    assert GPU.nvml_id == GPU.uuid  # not ordinal 0, which NVML gives to the other GPU
    sampler.sample()
    sampler.sample()
    assert sampler.mean() == pytest.approx(0.73)


def test_sampled_utilisation_reaches_the_diagnosis_as_a_percentage() -> None:
    sampler = UtilizationSampler(GPU.nvml_id, nvml=_TwoGpuNvml())
    sampler.sample()
    base = TrialView(Config(), "ok", samples_per_s=100.0, data_wait_fraction=0.02)
    best = TrialView(
        Config(batch_size=64),
        "ok",
        samples_per_s=150.0,
        data_wait_fraction=0.01,
        device_utilization=sampler.mean(),
    )
    text = diagnose(base, best, [base, best], GPU, memory_limited=False)
    assert "the GPU was busy 73% of the measured window" in text
    # Below 0.8 busy, a compute-bound GPU is held back by the host: the advice says so.
    assert "remove host synchronisations" in text


@cuda
def test_real_nvml_reports_a_fraction_for_this_gpu() -> None:
    from autotune.measure import device_info

    info = device_info(torch.device("cuda", 0))
    sampler = UtilizationSampler(info.nvml_id)
    assert sampler.available and isinstance(info.nvml_id, str)
    sampler.sample()
    mean = sampler.mean()
    assert mean is not None and 0.0 <= mean <= 1.0


# -- 6. the loop that is measured is the loop users run ----------------------------------------


def test_measured_loop_and_recommendation_train_identically(workload_file: Any) -> None:
    config = Config(batch_size=16, grad_accum_steps=2, amp="bf16")
    workload = load_workload(workload_file("tiny"))
    device = torch.device("cpu")

    torch.manual_seed(0)
    loop = TrainingLoop(workload, config, device)
    batches = [loop.next_batch() for _ in range(4)]
    for batch in batches:
        loop.step(batch)

    torch.manual_seed(0)
    rec = Recommendation(config, device, document={})
    model = rec.prepare_model(workload.model())
    optimizer = workload.optimizer(model.parameters())
    for inputs, target in batches:
        with rec.autocast():
            loss = workload.loss(model(inputs), target)
        rec.backward(loss, optimizer)

    for measured, applied in zip(loop.model.parameters(), model.parameters(), strict=True):
        assert torch.equal(measured, applied)


# -- 6. the harness does not tax what it measures ----------------------------------------------


def _live_tensors() -> int:
    gc.collect()
    # type(), not isinstance(): isinstance reads __class__, which warns on deprecated objects.
    return sum(issubclass(type(o), torch.Tensor) for o in gc.get_objects())


def test_the_loop_keeps_no_tensor_per_step(workload_file: Any) -> None:
    # A plain loop keeps nothing of a step. A tensor kept per step (the detached losses, once)
    # leaves hundreds of small live allocations among each step's large freed buffers, which
    # fragments the host's heap: text-transformer faulted in 8,000 fresh pages a step.
    loop = TrainingLoop(
        load_workload(workload_file("tiny")), Config(batch_size=16), torch.device("cpu")
    )
    for _ in range(5):
        loop.step(loop.next_batch())
    before = _live_tensors()
    for _ in range(50):  # across an epoch's end (32 steps per epoch)
        loop.step(loop.next_batch())
    assert _live_tensors() <= before
    loop.check_finite()


def _loss_turning(bad: float, at_step: int) -> Any:
    """Cross-entropy, except at one step whose loss reads ``bad`` (NaN or an infinity) while
    its gradient stays the cross-entropy's, so the model and every later loss stay finite."""
    steps = itertools.count()

    def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        value = F.cross_entropy(output, target)
        return value + (bad - value.detach()) if next(steps) == at_step else value

    return loss


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_one_non_finite_loss_among_finite_ones_is_caught(workload_file: Any, bad: float) -> None:
    tiny = load_workload(workload_file("tiny"))
    workload = dataclasses.replace(tiny, loss=_loss_turning(bad, at_step=12))
    loop = TrainingLoop(workload, Config(batch_size=16), torch.device("cpu"))
    for _ in range(10):
        loop.step(loop.next_batch())
    loop.check_finite()  # steps 0-9 were finite
    for _ in range(10):
        loop.step(loop.next_batch())
    with pytest.raises(NonFiniteLoss, match="NaN or infinite"):
        loop.check_finite()
    for _ in range(10):  # a new sum after each check
        loop.step(loop.next_batch())
    loop.check_finite()
