"""Trials and the profile as NCCL ranks, one GPU each (``cuda``-marked: they run only where a
GPU is, and have not run on the machine this suite was written on, which had none)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from autotune.errors import ConfigError
from autotune.measure import MeasurePlan
from autotune.runner import RankPlan, TrialLauncher, probe_workload, profile_workload, run_trial
from autotune.space import Config, SearchSpace
from autotune.tuner._profiling import profile_plan
from tests.conftest import FAST

pytestmark = [pytest.mark.cuda, pytest.mark.slow]

PLAN = MeasurePlan(**FAST)


def test_more_ranks_than_gpus_is_refused_naming_both_numbers(workload_file) -> None:
    gpus = torch.cuda.device_count()
    with (
        TrialLauncher(workload_file("tiny"), "cuda", RankPlan(gpus + 1, gpus + 1)),
        pytest.raises(ConfigError, match=f"needs {gpus + 1} GPUs .* shows {gpus}"),
    ):
        probe_workload(workload_file("tiny"), "cuda")


@pytest.fixture
def ranks_check_on_two_gpus(workload_file, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """ranks_check's path, its ranks writing what they built into ``tmp_path``; two GPUs."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    monkeypatch.setenv("AUTOTUNE_TEST_RANKS_DIR", str(tmp_path))
    return workload_file("ranks_check")


def test_two_nccl_ranks_each_on_its_own_gpu(ranks_check_on_two_gpus: str, tmp_path: Path) -> None:
    path = ranks_check_on_two_gpus
    with TrialLauncher(path, "cuda", RankPlan(2, 2)):
        record = run_trial(path, Config(batch_size=16), "cuda", PLAN, 180)
    assert record.outcome == "ok", record.error
    seen = [json.loads(p.read_text()) for p in tmp_path.glob("model-*.json")]
    assert sorted(s["backend"] for s in seen) == ["nccl", "nccl"]
    assert record.peak_memory_allocated_bytes, "each rank's device memory, the largest"


def test_the_profile_of_two_nccl_ranks_steps_on_both_gpus(
    ranks_check_on_two_gpus: str, tmp_path: Path
) -> None:
    path = ranks_check_on_two_gpus
    with TrialLauncher(path, "cuda", RankPlan(2, 2)):
        probe = probe_workload(path, "cuda")
        space = SearchSpace(probe.device.model_copy(update={"host_share": 2}), probe.workload)
        profile = profile_workload(path, "cuda", profile_plan(space, None, False, 4.0), 180)
    seen = [json.loads(p.read_text()) for p in tmp_path.glob("model-1-*.json")]
    assert seen and all(s["backend"] == "nccl" for s in seen), "rank 1 built the benches"
    assert profile.ranks == 2 and any(p.samples_per_s for p in profile.step)
