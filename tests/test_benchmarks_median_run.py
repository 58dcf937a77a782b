"""Section 1 judges the tuner on the job whose re-measured pick is the median of its seeds'."""

from __future__ import annotations

import pytest

from autotune.space import Config
from benchmarks._harness import Comparison, Run
from benchmarks._tuner import TunerOutcome, median_run, tuner_method


def job(seed: int, batch_size: int) -> TunerOutcome:
    return TunerOutcome(
        Config(batch_size=batch_size),
        n_trials=10,
        wall_s=60.0 + seed,
        counts={},
        timings=[],
        verdict="",
        seed=seed,
    )


def comparison(jobs: list[TunerOutcome], throughput: dict[int, list[float | None]]) -> Comparison:
    """Each job's pick re-measured at ``throughput[batch_size]`` (None: a failed run)."""
    runs = {
        config.key(): [
            Run("ok", value, 1.0) if value else Run("crashed", None, 1.0)
            for value in throughput[config.batch_size]
        ]
        for config in (j.config for j in jobs)
    }
    return Comparison({tuner_method(j.seed): j.config for j in jobs}, runs)


def test_the_median_pick_is_chosen_by_its_re_measurement_not_by_seed_order() -> None:
    jobs = [job(0, 64), job(1, 256), job(2, 128)]
    measured = comparison(
        jobs,
        {64: [1900.0, 2100.0, 2000.0], 256: [400.0, 500.0, 450.0], 128: [900.0, 1100.0, 1000.0]},
    )
    assert median_run(jobs, measured).seed == 2


def test_a_pick_that_failed_its_re_measurement_counts_as_the_slowest() -> None:
    jobs = [job(0, 64), job(1, 256), job(2, 128)]
    measured = comparison(jobs, {64: [None, None], 256: [500.0, 500.0], 128: [900.0, 900.0]})
    assert median_run(jobs, measured).seed == 1


@pytest.mark.parametrize("count", [1, 2])
def test_with_fewer_jobs_the_lower_middle_is_taken(count: int) -> None:
    jobs = [job(0, 64), job(1, 128)][:count]
    measured = comparison(jobs, {64: [1000.0], 128: [2000.0]})
    assert median_run(jobs, measured).seed == 0
