"""Trials as real DDP ranks (gloo on this CPU): the ranks' process group, their shards, the
host's share, the peak memory of every rank, a failing rank, and ``autotune run`` end to end."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil
import pytest

from autotune.measure import MeasurePlan
from autotune.recommend import validate_recommendation
from autotune.runner import RankPlan, TrialLauncher, run_trial
from autotune.space import Config
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
