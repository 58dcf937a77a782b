"""``python -m benchmarks.neighbourhood``: every configuration one searched knob away from a
pick, screened, and the close ones re-measured against it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.space import Config
from benchmarks._harness import Run
from benchmarks.neighbourhood import Contest, Neighbour, neighbours, verdict

ROOT = Path(__file__).resolve().parent.parent


def test_neighbours_change_one_knob_and_leave_out_what_cannot_take_effect() -> None:
    pick = Config(batch_size=64, num_workers=0)
    searched = {
        "batch_size": [32, 64, 128],
        "num_workers": [0, 4],
        # Without workers these give the pick itself: not neighbours.
        "prefetch_factor": [None, 1, 4],
        "persistent_workers": [False, True],
        "compile": ["off", "default"],
    }
    measured, compiled = neighbours(pick, searched)
    assert [(n.knob, n.value) for n in measured] == [
        ("batch_size", 32),
        ("batch_size", 128),
        ("num_workers", 4),
    ]
    assert [(n.knob, n.value) for n in compiled] == [("compile", "default")]
    for neighbour in measured + compiled:
        changed = {
            name
            for name, value in neighbour.config.model_dump().items()
            if value != pick.model_dump()[name]
        }
        assert changed - {"prefetch_factor"} == {neighbour.knob}


def test_a_pick_with_workers_has_prefetch_and_persistence_neighbours() -> None:
    pick = Config(batch_size=64, num_workers=4, prefetch_factor=2)
    measured, _ = neighbours(
        pick, {"prefetch_factor": [None, 1, 2, 4], "persistent_workers": [False, True]}
    )
    # None with workers is PyTorch's 2: the pick again.
    assert [(n.knob, n.value) for n in measured] == [
        ("prefetch_factor", 1),
        ("prefetch_factor", 4),
        ("persistent_workers", True),
    ]


def _run(speed: float) -> Run:
    return Run("ok", speed, 1.0)


def test_only_a_neighbour_faster_in_every_round_breaks_the_local_optimum() -> None:
    steady = Neighbour("num_workers", 4, Config(batch_size=64, num_workers=4))
    mixed = Neighbour("batch_size", 128, Config(batch_size=128))
    wins = Contest(steady, [_run(100), _run(100)], [_run(110), _run(104)])
    split = Contest(mixed, [_run(100), _run(100)], [_run(130), _run(95)])
    assert wins.beats_pick() and not split.beats_pick()
    assert verdict([split], 0.95).startswith("Verdict: a local optimum within the noise")
    assert "num_workers=4 beat the pick in every round (median 1.070x)" in verdict(
        [split, wins], 0.95
    )
    assert "no neighbour screened at 0.95" in verdict([], 0.95)


@pytest.mark.slow
def test_a_pick_without_workers_on_slow_storage_is_shown_not_a_local_optimum(
    tmp_path: Path,
) -> None:
    # Each slow-storage sample waits on storage: four workers deliver several times what the
    # training process reads alone, so the neighbour must win every round.
    document = {
        "config": Config(batch_size=32).public_dict(),
        "search_space": {"searched": {"batch_size": [32], "num_workers": [0, 4], "amp": ["off"]}},
        "memory_budget_bytes": None,
    }
    path = tmp_path / "recommendation.json"
    path.write_text(json.dumps(document))
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.neighbourhood",
            "builtin:slow-storage",
            str(path),
            "--rounds",
            "2",
            "--seconds",
            "0.5",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    assert "| num_workers | 4 |" in out
    row = next(line for line in out.splitlines() if line.startswith("| num_workers=4 |"))
    ratios = [float(r) for r in row.split("|")[4].split(",")]
    assert len(ratios) == 2 and min(ratios) > 1.5
    assert "Verdict: not a local optimum; num_workers=4 beat the pick in every round" in out


@pytest.mark.slow
def test_a_file_that_is_not_a_recommendation_is_refused_in_one_sentence(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"batch_size": 32}))
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.neighbourhood", "builtin:slow-storage", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode != 0
    assert "is not a recommendation document" in completed.stderr
    assert "autotune run --out" in completed.stderr
