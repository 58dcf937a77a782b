"""``retain_freed_memory``: glibc keeps a step's freed memory, so the next step faults nothing.

Each check runs in a fresh Python process (malloc's thresholds are process-wide) and counts the
minor page faults of a loop that allocates, touches and frees a 64 MiB tensor, as a training
step does with its activations: with glibc's defaults every round maps the block afresh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from autotune.measure import RETAIN_ENVIRONMENT, glibc_malloc
from autotune.space import KNOBS, Config, DeviceInfo, SearchSpace, WorkloadInfo

pytestmark = pytest.mark.skipif(not glibc_malloc(), reason="needs glibc's malloc (Linux)")

#: The fewest faults of a round that maps the 64 MiB block afresh: one per 2 MiB huge page where
#: the kernel backs it with transparent huge pages, one per 4 KiB page (16,384) otherwise.
FRESH_BLOCK_FAULTS = (64 << 20) // (2 << 20)
#: Under one fault per round on average: nothing of the block is faulted in again.
RETAINED_FAULTS = 0.5

_FAULTS_PER_ROUND = """
import json, resource, sys, torch
from autotune.measure import TrainingStep
from autotune.space import Config
retain = json.loads(sys.argv[1])
if retain is not None:
    TrainingStep(Config(retain_freed_memory=retain), torch.device("cpu")).prepare_model(
        torch.nn.Linear(2, 2))
def round_():
    block = torch.empty(16 << 20, dtype=torch.float32)  # 64 MiB
    block.fill_(1.0)
    del block
for _ in range(5):
    round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    round_()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""


def faults_per_round(retain: bool | None, environment: dict[str, str] | None = None) -> float:
    """Minor faults per allocate-touch-free round in a fresh process; ``retain`` None leaves
    malloc alone, else ``rec.prepare_model``'s code path applies the configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(environment or {})
    out = subprocess.run(
        [sys.executable, "-c", _FAULTS_PER_ROUND, json.dumps(retain)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_glibc_defaults_fault_the_block_in_every_round() -> None:
    # The premise of the knob: without it, the freed block goes back to the kernel.
    assert faults_per_round(None) >= FRESH_BLOCK_FAULTS
    assert faults_per_round(False) >= FRESH_BLOCK_FAULTS


@pytest.mark.slow
def test_retaining_freed_memory_faults_nothing_per_round() -> None:
    assert faults_per_round(True) < RETAINED_FAULTS


@pytest.mark.slow
def test_the_exported_environment_does_what_prepare_model_does() -> None:
    assert faults_per_round(None, RETAIN_ENVIRONMENT) < RETAINED_FAULTS


def _device(**fields: object) -> DeviceInfo:
    return DeviceInfo(
        **{"type": "cpu", "name": "cpu", "memory_bytes": 8 << 30, "cpu_count": 2, **fields}
    )  # type: ignore[arg-type]


WORKLOAD = WorkloadInfo(name="w", dataset_length=4096, input_batch_ndim=2, batch_size=32)


def test_searched_on_a_cpu_with_glibc_only() -> None:
    assert SearchSpace(_device(glibc_malloc=True), WORKLOAD).choices["retain_freed_memory"] == (
        False,
        True,
    )
    without = SearchSpace(_device(glibc_malloc=False), WORKLOAD)
    assert "glibc" in without.not_applicable["retain_freed_memory"]
    cuda = SearchSpace(_device(type="cuda", glibc_malloc=True, index=0), WORKLOAD)
    assert "CPU" in cuda.not_applicable["retain_freed_memory"]


def test_the_baseline_leaves_malloc_alone() -> None:
    space = SearchSpace(_device(glibc_malloc=True), WORKLOAD)
    assert space.baseline().retain_freed_memory is False
    assert KNOBS["retain_freed_memory"].default is False
    assert Config().retain_freed_memory is False
