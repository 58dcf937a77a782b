"""A hopeless trial is stopped during warm-up; warm-up reports its rate as it goes."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from autotune.measure import MeasurePlan, measure
from autotune.runner import TrialLauncher, run_trial
from autotune.search import hopeless_in_warmup
from autotune.space import Config
from autotune.workload import load_workload

#: Warm-up that does not settle by step count (sleepy's steps take 8 x 20 ms of reads), so it
#: lasts its ``max_warmup_s`` and reports every 0.2 s.
LONG_WARMUP = MeasurePlan(
    warmup_steps=1000, max_warmup_s=3.0, progress_interval_s=0.2, min_steps=3, min_seconds=0.3
)


@pytest.mark.slow
def test_warm_up_reports_its_rate_before_the_window(workload_file) -> None:
    events: list[dict[str, Any]] = []
    workload = load_workload(workload_file("sleepy"))
    metrics = measure(
        workload, Config(batch_size=8), torch.device("cpu"), LONG_WARMUP, progress=events.append
    )
    kinds = [(e["event"], bool(e.get("warmup"))) for e in events]
    warmed = kinds.index(("warmed_up", False))
    assert warmed >= 2 and all(kind == ("progress", True) for kind in kinds[:warmed])
    assert all(not warmup for _, warmup in kinds[warmed:])
    reports = events[:warmed]
    assert [e["steps"] for e in reports] == sorted({e["steps"] for e in reports})
    assert all(e["seconds"] > 0 and e["samples_per_s"] > 0 for e in reports)
    # A step reads 8 samples at 20 ms each: the warm-up rate is at most 50 samples/s, as is
    # the window's, which warm-up reporting leaves as it was.
    assert reports[-1]["samples_per_s"] <= 50 and metrics.samples_per_s <= 50
    assert metrics.warmup_steps >= reports[-1]["steps"]


@pytest.mark.parametrize(
    ("event", "finished", "hopeless"),
    [
        ({"warmup": True, "steps": 8, "seconds": 1.5, "samples_per_s": 20.0}, [100.0] * 3, True),
        ({"warmup": True, "steps": 8, "seconds": 1.5, "samples_per_s": 30.0}, [100.0] * 3, False),
        # too few steps, too short, too few finished trials: no verdict yet
        ({"warmup": True, "steps": 4, "seconds": 1.5, "samples_per_s": 1.0}, [100.0] * 3, False),
        ({"warmup": True, "steps": 8, "seconds": 0.9, "samples_per_s": 1.0}, [100.0] * 3, False),
        ({"warmup": True, "steps": 8, "seconds": 1.5, "samples_per_s": 1.0}, [100.0] * 2, False),
        # a window's progress is the window rule's to judge
        ({"steps": 8, "seconds": 1.5, "samples_per_s": 1.0}, [100.0] * 3, False),
    ],
)
def test_the_warm_up_rule_is_conservative(
    event: dict[str, Any], finished: list[float], hopeless: bool
) -> None:
    assert hopeless_in_warmup(event, finished) is hopeless


@pytest.mark.slow
@pytest.mark.parametrize("start", ["fork", "exec"])
def test_a_hopeless_trial_is_pruned_during_warm_up(
    workload_file, monkeypatch: pytest.MonkeyPatch, start: str
) -> None:
    monkeypatch.setenv("AUTOTUNE_TRIAL_START", start)
    workload = workload_file("sleepy")
    seen: list[dict[str, Any]] = []

    def far_below_the_best(event: dict[str, Any]) -> bool:
        seen.append(event)
        return hopeless_in_warmup(event, [1000.0] * 3)  # sleepy reads at most 50 samples/s

    with TrialLauncher(workload, "cpu"):
        record = run_trial(
            workload, Config(batch_size=8), "cpu", LONG_WARMUP, 60, on_progress=far_below_the_best
        )
    assert record.outcome == "ok" and record.pruned and record.pruned_during_warmup
    assert not record.usable
    assert all(e.get("warmup") for e in seen)  # stopped before any window progress
    assert record.window_s is None and record.steps is None
    assert record.warmup_steps is not None and record.warmup_steps >= 5
    assert 0 < record.samples_per_s < 250
    # Stopped after about a second of steps, well before the 3 s warm-up would have ended.
    assert seen[-1]["seconds"] < 3.0


@pytest.mark.slow
def test_a_trial_near_the_best_is_not_pruned_during_warm_up(workload_file) -> None:
    workload = workload_file("sleepy")
    with TrialLauncher(workload, "cpu"):
        record = run_trial(
            workload,
            Config(batch_size=8),
            "cpu",
            LONG_WARMUP,
            60,
            on_progress=lambda event: hopeless_in_warmup(event, [60.0] * 3),
        )
    assert record.outcome == "ok" and not record.pruned and not record.pruned_during_warmup
    assert record.window_s is not None
