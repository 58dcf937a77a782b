"""Trials and the profile as real DDP ranks (gloo on this CPU): the ranks' process group,
their shards (an iterable dataset's too), the host's share, the peak memory of every rank, a
failing rank, the profile's lockstep and its global predictions, and ``autotune run`` end to
end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest

from autotune.measure import MeasurePlan
from autotune.predict import predict_configs
from autotune.recommend import validate_recommendation
from autotune.runner import RankPlan, TrialLauncher, probe_workload, profile_workload, run_trial
from autotune.space import Config, SearchSpace
from autotune.tuner._profiling import profile_plan
from tests.conftest import FAST
from tests.test_cli import FAST_FLAGS, autotune

pytestmark = pytest.mark.slow

PLAN = MeasurePlan(**FAST)
BALLAST = 512 * 2**20


def seen_by_ranks(out: Path) -> dict[str, dict[str, object]]:
    """What each rank's model wrote down, by rank."""
    return {
        path.name.split("-")[1]: json.loads(path.read_text()) for path in out.glob("model-*.json")
    }


def samples_by_rank(out: Path) -> dict[str, set[int]]:
    loaded: dict[str, set[int]] = {}
    for path in out.glob("samples-*.txt"):
        rank = path.name.split("-")[1]
        loaded.setdefault(rank, set()).update(int(i) for i in path.read_text().split())
    return loaded


@pytest.fixture
def out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AUTOTUNE_TEST_RANKS_DIR", str(tmp_path))
    return tmp_path


def test_a_trial_of_two_ranks_is_a_gloo_ddp_job_with_global_throughput(
    out: Path, workload_file, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUTOTUNE_TEST_BALLAST_BYTES", str(BALLAST))
    path = workload_file("ranks_check")
    with TrialLauncher(path, "cpu", RankPlan(2, 2)):
        record = run_trial(path, Config(batch_size=16), "cpu", PLAN, 120)
    assert record.outcome == "ok", record.error
    seen = seen_by_ranks(out)
    assert sorted(seen) == ["0", "1"]
    assert all(rank["world"] == 2 and rank["backend"] == "gloo" for rank in seen.values())
    # torchrun's default of one intra-op thread per rank.
    assert all(rank["threads"] == 1 for rank in seen.values())
    # Each rank loads its own shard (DistributedSampler), together the whole dataset.
    loaded = samples_by_rank(out)
    assert loaded["0"].isdisjoint(loaded["1"])
    assert loaded["0"] | loaded["1"] == set(range(256))
    # Host memory is every rank's: each holds its own ballast (the ranks' own high-water marks
    # say so where the sampler, at the lowest priority on busy cores, read too seldom).
    assert record.peak_host_memory_bytes is not None
    assert record.peak_host_memory_bytes >= 2 * BALLAST
    assert record.samples_per_s and record.step_time_median_ms
    # Throughput is all ranks' samples: the steps each rank took, 16 samples each, both ranks.
    assert record.samples_per_s == pytest.approx(
        2 * 16 * 1000 / record.step_time_median_ms, rel=0.5
    )


def test_a_failing_rank_ends_every_rank_with_its_reason(out: Path, workload_file) -> None:
    path = workload_file("ranks_check") + ":fails_on_rank1"
    with TrialLauncher(path, "cpu", RankPlan(2, 2)):
        record = run_trial(path, Config(batch_size=16), "cpu", PLAN, 120)
    assert record.outcome == "error"
    assert record.error is not None
    assert "rank 1 of 2" in record.error and "rank 1 gives up on purpose" in record.error
    pids = [int(rank["pid"]) for rank in seen_by_ranks(out).values()]  # type: ignore[call-overload]
    assert len(pids) == 2
    gone, alive = psutil.wait_procs([p for p in map(_process, pids) if p is not None], timeout=10)
    assert alive == [], f"ranks left running: {alive}"


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def test_host_share_gives_a_single_process_trial_its_share_of_the_cores(
    out: Path, workload_file
) -> None:
    path = workload_file("ranks_check")
    cores = sorted(os.sched_getaffinity(0))
    with TrialLauncher(path, "cpu", RankPlan(1, len(cores))):
        record = run_trial(path, Config(batch_size=16), "cpu", PLAN, 120)
    assert record.outcome == "ok", record.error
    (seen,) = seen_by_ranks(out).values()
    assert seen["world"] is None, "one process, no process group"
    assert seen["affinity"] == cores[:1] and seen["threads"] == 1


def test_run_tunes_two_gloo_ranks_end_to_end(tmp_path: Path, workload_file) -> None:
    out = tmp_path / "best.json"
    result = autotune(
        "run",
        workload_file("tiny"),
        "--nproc-per-node",
        "2",
        "--device",
        "cpu",
        "--trials",
        "2",
        "--patience",
        "0",
        "--db",
        str(tmp_path / "a.db"),
        "--out",
        str(out),
        *FAST_FLAGS,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    validate_recommendation(document)
    assert document["distributed"] == {"nproc_per_node": 2, "backend": "gloo", "host_share": 2}
    launch = document["exports"]["launch"]
    assert launch["torchrun"].startswith("torchrun --standalone --nproc-per-node 2 ")
    assert launch["lightning_trainer"] == {"devices": 2, "strategy": "ddp"}
    assert launch["accelerate"] == {"num_processes": 2}
    same = document["same_effective_batch"]
    assert same["global_effective_batch"] == 2 * same["effective_batch"]
    # Workers are per rank: the searched range is the host's bound divided between two ranks.
    assert max(document["search_space"]["searched"]["num_workers"]) <= 16 // 2


# -- the profile as the ranks ---------------------------------------------------------------


def test_the_profile_of_two_ranks_runs_as_two_ddp_ranks_in_lockstep(
    out: Path, workload_file
) -> None:
    path = workload_file("ranks_check")
    with TrialLauncher(path, "cpu", RankPlan(2, 2)):
        probe = probe_workload(path, "cpu", 60)
        space = SearchSpace(probe.device.model_copy(update={"host_share": 2}), probe.workload)
        profile = profile_workload(path, "cpu", profile_plan(space, None, True, 4.0), 180)
    # Both ranks built the profile's models in one process group of two (rank 1's benches
    # are DDP's, stepping with rank 0's): one process would leave rank "single" alone.
    seen = seen_by_ranks(out)
    assert {"0", "1"} <= set(seen), sorted(seen)
    assert seen["1"]["world"] == 2 and seen["1"]["backend"] == "gloo"
    assert seen["0"]["pid"] != seen["1"]["pid"]
    # Rank 1 ran the loader sweep on its own shard at once: the indices it loaded.
    assert samples_by_rank(out).get("1"), "rank 1 pulled no loader batch"
    # One rank's profile: its shard of the epoch, its share of the cores.
    assert profile.ranks == 2
    assert profile.dataset_length == 256 // 2
    assert profile.cpu_count == max(1, len(os.sched_getaffinity(0)) // 2)


def test_the_predictions_of_two_ranks_are_global_as_their_trials(out: Path, workload_file) -> None:
    path = workload_file("compute_heavy")  # a wide MLP: its all-reduce costs the step
    with TrialLauncher(path, "cpu", RankPlan(2, 2)):
        probe = probe_workload(path, "cpu", 60)
        space = SearchSpace(probe.device.model_copy(update={"host_share": 2}), probe.workload)
        profile = profile_workload(path, "cpu", profile_plan(space, None, True, 4.0), 180)
        # The batches the step sweep timed (beyond them a prediction extrapolates).
        timed = [p.batch_size for p in profile.step_points("off", False) if p.samples_per_s]
        configs = [Config(batch_size=batch) for batch in timed[-2:]]
        assert configs, profile.step
        records = [run_trial(path, config, "cpu", PLAN, 120) for config in configs]
    predicted = predict_configs(profile, configs).samples_per_s
    for config, record, rate in zip(configs, records, predicted, strict=True):
        assert record.outcome == "ok", record.error
        assert record.samples_per_s is not None
        # One rank's rate times the ranks: a prediction left per rank reads half the trial.
        assert 0.65 < record.samples_per_s / rate < 1.6, (config.batch_size, rate, record)


def test_an_iterable_dataset_is_sharded_across_the_ranks(out: Path, workload_file) -> None:
    path = workload_file("ranks_check") + ":stream"
    with TrialLauncher(path, "cpu", RankPlan(2, 2)):
        record = run_trial(path, Config(batch_size=16, num_workers=1), "cpu", PLAN, 120)
    assert record.outcome == "ok", record.error
    loaded = samples_by_rank(out)
    assert loaded.get("0") and loaded.get("1"), loaded.keys()
    # Every other item of the stream each: no sample is counted twice in the global rate.
    assert loaded["0"].isdisjoint(loaded["1"])
    assert all(i % 2 == 0 for i in loaded["0"]) and all(i % 2 == 1 for i in loaded["1"])
