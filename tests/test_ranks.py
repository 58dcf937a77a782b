"""Ranks sharing the host, without starting a process: the rank plan, the host's division,
the GPU count check, the device locks of several ranks, and which worker claims a job of N
ranks. Real ranks (gloo) are in test_ranks_gloo.py."""

from __future__ import annotations

import os
import threading
import time

import conftest_service
import numpy as np
import pytest
import torch
import torch.distributed as dist
from conftest_service import add_job
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler, TensorDataset

from api.schemas import JobCreate
from autotune.errors import ConfigError
from autotune.measure._distributed import rank0_decides, shard_loader_kwargs, wrap_model
from autotune.predict import predict_configs
from autotune.recommend._export import launch_exports
from autotune.runner import RankPlan, TrialLauncher, check_gpu_count, rank_devices
from autotune.runner._process import _host_cap, default_host_memory_cap
from autotune.runner._ranks import combine_metrics
from autotune.search import InfeasibleSet
from autotune.service import ClaimPolicy, claim_next
from autotune.service._worker import _max_ranks
from autotune.space import Config, DeviceInfo
from autotune.space._host import max_workers_per_rank, over_host
from autotune.store import Database, Job, device_locks, throughput_over_run, try_file_lock
from autotune.tuner import TuneOptions
from autotune.tuner._predictor import Predictor
from tests.test_predict import make_profile, small_space

database_url, database = conftest_service.database_url, conftest_service.database


# -- fewer GPUs than ranks ------------------------------------------------------------------


def test_fewer_gpus_than_ranks_is_one_sentence_naming_both_numbers() -> None:
    with pytest.raises(ConfigError) as error:
        check_gpu_count(8, 2)
    message = str(error.value)
    assert "--nproc-per-node 8 needs 8 GPUs" in message and "shows 2" in message
    assert message.count(".") <= 1 and "lower --nproc-per-node to 2" in message


def test_the_ranks_devices_are_counted_from_the_device_named() -> None:
    assert rank_devices("cuda:1", 2, gpus=4) == ["cuda:1", "cuda:2"]
    assert rank_devices("auto", 3, gpus=3) == ["cuda:0", "cuda:1", "cuda:2"]
    assert rank_devices("auto", 2, gpus=0) == ["cpu"]
    assert rank_devices("cpu", 4) == ["cpu"], "ranks on a CPU share it"
    with pytest.raises(ConfigError, match="needs 4 GPUs .* shows 3"):
        rank_devices("cuda:1", 4, gpus=4)  # cuda:1..cuda:4 on a host of cuda:0..cuda:3


# -- the host divided among the ranks -------------------------------------------------------


def test_a_rank_plan_divides_the_cores_and_the_memory() -> None:
    plan = RankPlan(nproc=2, host_share=4)
    assert plan.cores(range(8), 1) == [0, 1]
    assert plan.cores(range(8), 2) == [0, 1, 2, 3]
    assert RankPlan(2, 2).cores(range(8), 2) is None, "all the cores: no pinning"
    assert RankPlan(1, 16).cores(range(2), 1) == [0], "one core at least"
    assert plan.memory_share(2) == 0.5
    cores = sorted(os.sched_getaffinity(0))
    fields = RankPlan(1, len(cores)).request_fields("trial")
    assert fields == {"ranks": 1, "cores": cores[:1] if len(cores) > 1 else None}
    # The probe sees one rank's share; a trial and the profile run every rank on their shares.
    shared = RankPlan(2, 2 * len(cores))
    assert shared.request_fields("probe") == {
        "ranks": 1,
        "cores": cores[:1] if len(cores) > 1 else None,
        "gpus_wanted": 2,
    }
    assert shared.request_fields("trial") == {
        "ranks": 2,
        "cores": cores[:2] if len(cores) > 2 else None,
    }
    assert shared.request_fields("profile") == shared.request_fields("trial")


def test_a_host_share_below_the_ranks_is_refused_in_words() -> None:
    with pytest.raises(ConfigError, match="host share of 1 cannot hold 2 ranks"):
        RankPlan(nproc=2, host_share=1)
    with pytest.raises(ValueError, match="host share 2 is below nproc_per_node 4"):
        TuneOptions(workload="builtin:image-cnn", nproc_per_node=4, host_share=2)
    assert TuneOptions(workload="w", nproc_per_node=4).ranks_sharing_host == 4


def test_a_job_submitted_to_the_service_can_ask_for_ranks() -> None:
    job = JobCreate(workload="builtin:image-cnn", nproc_per_node=2, host_share=8)
    assert (job.nproc_per_node, job.ranks_sharing_host) == (2, 8)
    with pytest.raises(ValueError):
        JobCreate(workload="builtin:image-cnn", nproc_per_node=0)


def test_the_memory_cap_is_the_ranks_share_of_the_host() -> None:
    whole = default_host_memory_cap()
    with TrialLauncher("builtin:image-cnn", "cpu", RankPlan(1, 4)):
        cap, name = _host_cap(None, False, ranks=1)
        assert cap == pytest.approx(whole / 4, rel=0.05)
        assert "1 of 4 ranks' share" in name
    with TrialLauncher("builtin:image-cnn", "cpu", RankPlan(2, 2)):
        assert _host_cap(None, False, ranks=2)[0] == pytest.approx(whole, rel=0.05)
        # A budget on a CPU is per rank: the trial's ranks get it each.
        assert _host_cap(2**30, True, ranks=2) == (2**31, "the memory budget (2 ranks)")


def _cpu(cores: int, share: int) -> DeviceInfo:
    return DeviceInfo(type="cpu", name="x", memory_bytes=2**34, cpu_count=cores, host_share=share)


def test_workers_on_every_rank_beyond_the_host_are_infeasible_not_measured() -> None:
    # 16 cores shared by 8 ranks (2 each): the host's bound of 64 workers is 8 per rank.
    device = _cpu(2, 8)
    assert max_workers_per_rank(device) == 8
    assert over_host(device, Config(num_workers=8)) is None
    reason = over_host(device, Config(num_workers=12))
    assert reason is not None and "num_workers=12 on each of 8 ranks is 96 loader workers" in reason
    skipped = InfeasibleSet(lambda config: over_host(device, config))
    assert skipped.reason(Config(num_workers=12)) == reason
    assert skipped.reason(Config(num_workers=4)) is None
    # One process with the whole host: nothing to share.
    assert over_host(_cpu(16, 1), Config(num_workers=12)) is None


def test_the_trials_metrics_are_global_samples_and_the_slowest_rank() -> None:
    combined = combine_metrics(
        [
            {"samples_per_s": 100.0, "step_time_median_ms": 10.0, "steps": 9},
            {"samples_per_s": 90.0, "step_time_median_ms": 12.0, "steps": 9},
            {
                "samples_per_s": 80.0,
                "step_time_median_ms": 11.0,
                "peak_memory_allocated_bytes": 7,
                "steps": 8,
            },
        ]
    )
    assert combined["samples_per_s"] == 270.0
    assert combined["step_time_median_ms"] == 12.0
    assert combined["peak_memory_allocated_bytes"] == 7
    assert combined["steps"] == 9, "counts are rank 0's"


def test_the_launch_exports_start_the_ranks_tuned_for() -> None:
    launch = launch_exports(8)
    assert launch["torchrun"] == "torchrun --standalone --nproc-per-node 8 YOUR_SCRIPT.py"
    assert launch["lightning_trainer"] == {"devices": 8, "strategy": "ddp"}
    assert launch["accelerate"] == {"num_processes": 8}


def test_one_rank_of_a_process_group_wraps_the_model_and_shards_the_data() -> None:
    """A process group of one (gloo, in this process): what each rank of a trial does."""
    dataset = TensorDataset(torch.zeros(8, 2))
    model = torch.nn.Linear(2, 1)
    assert wrap_model(model, torch.device("cpu")) is model, "no group: as is"
    assert shard_loader_kwargs(dataset, {"shuffle": True}) == {"shuffle": True}
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert isinstance(wrap_model(model, torch.device("cpu")), DistributedDataParallel)
        sharded = shard_loader_kwargs(dataset, {"shuffle": True, "batch_size": 4})
        assert isinstance(sharded["sampler"], DistributedSampler)
        assert "shuffle" not in sharded and sharded["batch_size"] == 4
        assert rank0_decides(True, torch.device("cpu")) is True
    finally:
        dist.destroy_process_group()


# -- the devices of several ranks, locked together -------------------------------------------


def test_two_workers_locking_the_same_devices_in_opposite_orders_take_turns() -> None:
    """Each holds both GPUs for each of its trials: never both at once, and both finish."""
    holders: list[str] = []
    overlaps: list[str] = []

    def trials(name: str, devices: list[str]) -> None:
        for _ in range(20):
            with device_locks(None, devices) as held:
                assert held
                if holders:
                    overlaps.append(f"{name} with {holders}")
                holders.append(name)
                time.sleep(0.002)
                holders.remove(name)

    threads = [
        threading.Thread(target=trials, args=("a", ["cuda:GPU-1", "cuda:GPU-2"]), daemon=True),
        threading.Thread(target=trials, args=("b", ["cuda:GPU-2", "cuda:GPU-1"]), daemon=True),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads), "the two workers deadlocked"
    assert overlaps == [], "two trials held the same GPUs at once"


def test_the_devices_are_taken_in_one_order_whatever_order_they_are_listed_in() -> None:
    """A worker waiting for GPU-1 holds nothing after it, so that a worker holding GPU-1 can
    take GPU-2 too: neither waits for the other for ever."""
    first = try_file_lock("device-cuda:GPU-1")  # another worker's trial holds GPU-1
    assert first is not None
    cancel = threading.Event()
    waiting = threading.Thread(
        target=lambda: device_locks(None, ["cuda:GPU-2", "cuda:GPU-1"], cancel).__enter__(),
        daemon=True,
    )
    try:
        waiting.start()
        time.sleep(0.5)
        assert waiting.is_alive(), "it did not wait for GPU-1"
        second = try_file_lock("device-cuda:GPU-2")
        assert second is not None, "it took GPU-2 while waiting for GPU-1: a deadlock waits"
        second.close()
    finally:
        cancel.set()
        first.close()
        waiting.join(timeout=5)


def test_a_cancel_while_waiting_for_one_device_lets_go_of_the_others() -> None:
    busy = try_file_lock("device-cuda:GPU-2")  # another worker's trial holds GPU-2
    assert busy is not None
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    try:
        with device_locks(None, ["cuda:GPU-1", "cuda:GPU-2"], cancel) as held:
            assert held is False
        first = try_file_lock("device-cuda:GPU-1")
        assert first is not None, "GPU-1 stayed locked after the cancel"
        first.close()
    finally:
        busy.close()


# -- which worker claims a job of N ranks ---------------------------------------------------


def test_a_job_of_n_ranks_is_claimed_only_by_a_worker_owning_n_devices(
    database: Database,
) -> None:
    h100 = "cuda: NVIDIA H100 80GB HBM3"
    with database.session() as session:
        job = Job(
            workload="builtin:image-cnn",
            options={"workload": "builtin:image-cnn", "nproc_per_node": 2},
            device_class=h100,
        )
        session.add(job)
        session.flush()
        two_ranks = job.id

    def claim(worker: str, max_ranks: int) -> int | None:
        with database.session(immediate=True) as session:
            job = claim_next(session, worker, ClaimPolicy(), device_class=h100, max_ranks=max_ranks)
            return None if job is None else job.id

    assert claim("one-gpu", 1) is None
    one_rank = add_job(database, device_class=h100)  # no nproc_per_node: one rank
    assert claim("one-gpu", 1) == one_rank, "the job it can run, behind the one it cannot"
    assert claim("two-gpus", 2) == two_ranks


def test_a_worker_owns_its_cores_in_ranks_on_a_cpu_and_at_least_one_device() -> None:
    from autotune.measure import device_identity

    cpu_class = device_identity("cpu").device_class
    assert _max_ranks("cpu", 1, cpu_class) == len(os.sched_getaffinity(0))
    with pytest.raises(ConfigError, match="--devices 0"):
        _max_ranks("cpu", 0, cpu_class)


# -- the profile's rates per rank, its predictions global ----------------------------------


def test_a_profile_of_two_ranks_predicts_global_samples_per_second() -> None:
    one = make_profile({16: 100.0, 32: 150.0}, {0: 400.0, 1: 300.0, 2: 600.0})
    two = one.model_copy(update={"ranks": 2})
    configs = [Config(batch_size=16), Config(batch_size=32, num_workers=2)]
    per_rank, both = predict_configs(one, configs), predict_configs(two, configs)
    assert np.allclose(both.samples_per_s, 2 * per_rank.samples_per_s)
    assert np.allclose(both.step_samples_per_s, 2 * per_rank.step_samples_per_s)
    assert np.allclose(both.memory_bytes, per_rank.memory_bytes), "memory stays one rank's"
    # The judges read the same unit as the trials: the ceiling, a prediction over a run of
    # global samples (compile charged against the global rate).
    space = small_space({"batch_size": "16,32", "num_workers": "0,2"})
    ceilings = [Predictor(p, space, None).ceiling([]) for p in (one, two)]
    assert ceilings[0] is not None and ceilings[1] is not None
    assert ceilings[1][0] == pytest.approx(2 * ceilings[0][0])
    predicted = Predictor(two, space, None).samples_per_s(configs[0])
    assert predicted == pytest.approx(2 * float(per_rank.samples_per_s[0]))
    assert throughput_over_run(predicted, 1.0, 4 * int(predicted)) == pytest.approx(0.8 * predicted)
