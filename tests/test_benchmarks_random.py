"""The benchmark's random search at the tuner's wall time, replayed on a hand-made grid."""

from __future__ import annotations

import itertools
import statistics

import pytest

from autotune.space import DeviceInfo, SearchSpace, WorkloadInfo
from benchmarks._alternatives import random_method, random_within, tuner_against_random
from benchmarks._harness import TUNER, Comparison, Run
from benchmarks._search_quality import GridOutcome

CPU = DeviceInfo(type="cpu", name="test cpu", memory_bytes=16 * 2**30, cpu_count=2)
WORKLOAD = WorkloadInfo(name="w", dataset_length=4096, input_batch_ndim=2, batch_size=32)
SPACE = SearchSpace(
    CPU,
    WORKLOAD,
    fixed={
        "prefetch_factor": None,
        "persistent_workers": False,
        "compile": "off",
        "intra_op_threads": None,
    },
    ranges={"batch_size": [32, 64, 128, 256], "num_workers": [0, 1, 2, 4], "amp": ["off"]},
)


def grid(seconds_each: float) -> GridOutcome:
    """Every configuration of SPACE; throughput grows with batch x (workers + 1)."""
    configs = [
        SPACE.config_from({"batch_size": b, "num_workers": w, "amp": "off"})
        for b, w in itertools.product([32, 64, 128, 256], [0, 1, 2, 4])
    ]
    runs = {
        c.key(): Run("ok", float(c.batch_size * (c.num_workers + 1)), seconds_each) for c in configs
    }
    return GridOutcome(configs, runs, wall_s=seconds_each * len(configs))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_search_stops_at_the_wall_time_and_never_draws_twice(seed: int) -> None:
    outcome = grid(seconds_each=10.0)
    draw = random_within(SPACE, outcome, wall_s=45.0, seed=seed)
    assert draw.drawn == 4 and draw.spent_s == pytest.approx(40.0)
    assert draw.pick.key() in outcome.runs


def test_random_search_picks_its_best_draw_and_finds_the_best_with_the_grids_time() -> None:
    outcome = grid(seconds_each=10.0)
    short = random_within(SPACE, outcome, wall_s=35.0, seed=0)
    assert short.drawn == 3
    everything = random_within(SPACE, outcome, wall_s=outcome.wall_s, seed=0)
    assert everything.drawn == len(outcome.configs)
    assert everything.pick.key() == outcome.best().key()


def test_random_search_draws_one_configuration_even_when_the_budget_is_smaller() -> None:
    draw = random_within(SPACE, grid(seconds_each=10.0), wall_s=1.0, seed=0)
    assert draw.drawn == 1 and draw.spent_s == pytest.approx(10.0)


def test_random_search_is_judged_on_the_interleaved_re_measurement_not_on_its_draw() -> None:
    """Random search keeps the draw whose single grid run read highest; that run flatters it.
    Here every random pick read above the tuner's pick in the grid, but measured side by side
    they are slower: the verdict follows the side-by-side runs and quotes the grid's reading."""
    outcome = grid(seconds_each=10.0)
    draws = [random_within(SPACE, outcome, wall_s=45.0, seed=seed) for seed in (0, 1, 2)]
    tuner_pick = SPACE.config_from({"batch_size": 32, "num_workers": 0, "amp": "off"})
    assert all(outcome.value(d.pick) > outcome.value(tuner_pick) for d in draws)
    configs = {TUNER: tuner_pick, **{random_method(d.seed): d.pick for d in draws}}
    runs = {c.key(): [Run("ok", 100.0, 10.0)] * 3 for c in configs.values()}
    runs[tuner_pick.key()] = [Run("ok", value, 10.0) for value in (118.0, 120.0, 125.0)]
    [finding] = tuner_against_random(
        "w", tuner_pick, 45.0, outcome, Comparison(configs, runs), draws
    )
    assert "tuner / random median 1.20x (target >= 1.00x: met" in finding
    single = statistics.median(outcome.value(tuner_pick) / outcome.value(d.pick) for d in draws)
    assert f"the median would read {single:.2f}x" in finding and single < 1.0
