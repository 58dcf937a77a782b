"""Within the job's time: the profile's compile and optimizer timings as columns of the
predictor, the seeds and judges that read them, and the share of the job's remaining time one
compile, or one trial, may take (see docs/design/prediction.md, "The step")."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

import numpy as np
import pytest
from test_predict import CPU, TOKENS, compile_space, make_profile

from autotune.measure import MeasurePlan
from autotune.measure.profiling._plan import OPTIMIZER_OVERHEAD_S
from autotune.predict import CompilePoint, OptimizerPoint, Profile, predict_configs, predict_space
from autotune.space import Config, SearchSpace
from autotune.store import Database
from autotune.tuner import TuneOptions
from autotune.tuner._budget import COMPILE_SHARE, TYPICAL_TRIAL_S, TimeBudget, trial_seconds
from autotune.tuner._job import _JobRun
from autotune.tuner._judges import MIN_COMPILE_GAIN, JobJudges
from autotune.tuner._predictor import Predictor
from autotune.tuner._profiling import profile_plan
from autotune.tuner._reporter import Reporter
from autotune.tuner._seeding import SeedBounds, seed_configs

#: Enough samples in the run that a compile of tens of seconds is repaid by a faster step.
LONG_RUN = 10_000_000


def compiling_profile(compile_s: float, ratio: float, **point: Any) -> Profile:
    """A profile whose step reaches 2,000 samples/s at batch 64, with ``compile`` (default)
    timed at ``compile_s`` seconds and a step ``ratio`` times the eager one's."""
    profile = make_profile({32: 1000.0, 64: 2000.0, 128: 2000.0}, {0: 1e5, 2: 2e5})
    timing = CompilePoint(
        mode="default",
        batch_size=32,
        amp="off",
        compile_s=compile_s,
        samples_per_s=1000.0 * ratio,
        eager_samples_per_s=1000.0,
        budget_s=point.pop("budget_s", 100.0),
        **point,
    )
    return profile.model_copy(update={"compile": [timing]})


def seeds(
    profile: Profile, run_samples: int | None, allowance: float | None, against_eager: bool = True
) -> list[Config]:
    """The seeds of :func:`compile_space` as a job takes them (``against_eager``: a compiled
    one must beat its eager twin by :data:`MIN_COMPILE_GAIN`)."""
    space = compile_space()
    predictor = Predictor(profile, space, None)
    eager = predictor.eager().samples_per_s if against_eager else None
    return seed_configs(
        predictor.all(),
        space,
        20,
        [space.baseline()],
        bounds=SeedBounds(run_samples, allowance, eager_samples_per_s=eager),
    )


def test_a_timed_compile_is_a_column_of_the_step() -> None:
    profile = compiling_profile(compile_s=30.0, ratio=1.5)
    eager, compiled = Config(batch_size=64), Config(batch_size=64, compile="default")
    predicted = predict_configs(profile, [eager, compiled])
    assert predicted.step_samples_per_s[1] == pytest.approx(1.5 * predicted.step_samples_per_s[0])
    assert list(predicted.compile_s) == [0.0, 30.0]
    # Timed, so no longer an uncovered knob; still less certain than the eager step.
    assert predicted.uncovered_knobs(1) == frozenset()
    assert predicted.uncertainty[1] > predicted.uncertainty[0]
    # Over a run, the compile is charged once.
    over = predicted.over_run(60_000)
    rate = predicted.samples_per_s[1]
    assert over[1] == pytest.approx(60_000 / (60_000 / rate + 30.0))
    assert over[0] == predicted.samples_per_s[0]


def test_an_untimed_compile_keeps_the_eager_step_and_an_unknown_cost() -> None:
    profile = make_profile({32: 1000.0, 64: 2000.0}, {0: 1e5})
    predicted = predict_configs(
        profile, [Config(batch_size=64), Config(batch_size=64, compile="default")]
    )
    assert predicted.samples_per_s[1] == predicted.samples_per_s[0]
    assert np.isnan(predicted.compile_s[1])
    assert predicted.uncovered_knobs(1) == {"compile"}


def test_a_compile_is_seeded_only_once_timed_repaid_and_within_the_jobs_share() -> None:
    gaining = compiling_profile(compile_s=30.0, ratio=2.0)
    assert any(c.compile == "default" for c in seeds(gaining, LONG_RUN, 100.0))
    # Never timed: no compiled seed, however long the run.
    untimed = make_profile({32: 1000.0, 64: 2000.0, 128: 2000.0}, {0: 1e5, 2: 2e5})
    assert not any(c.compile != "off" for c in seeds(untimed, LONG_RUN, 100.0))
    # Costing more than the job may spend on one compile: none either.
    assert not any(c.compile != "off" for c in seeds(gaining, LONG_RUN, 29.0))
    # A run too short to repay it ranks the compiled configurations under their eager twins.
    assert not any(c.compile != "off" for c in seeds(gaining, 20_000, 100.0))
    # Over its allowance in the profile: a lower bound, never seeded.
    over = compiling_profile(compile_s=100.0, ratio=2.0, over_budget=True)
    over = over.model_copy(
        update={"compile": [over.compile[0].model_copy(update={"samples_per_s": None})]}
    )
    assert not any(c.compile != "off" for c in seeds(over, LONG_RUN, 1000.0))


def test_a_compile_is_seeded_and_measured_only_where_it_gains_beyond_the_spread() -> None:
    # Timed a hundredth faster than eager: repaid over a long run, but by less than the
    # profile's reading can tell apart. Neither seeded nor measured.
    marginal = compiling_profile(compile_s=30.0, ratio=1.01)
    assert not any(c.compile != "off" for c in seeds(marginal, LONG_RUN, 100.0))
    assert any(c.compile != "off" for c in seeds(marginal, LONG_RUN, 100.0, against_eager=False))
    best, compiled = Config(batch_size=64), Config(batch_size=64, compile="default")
    reason = judges(marginal, 100.0).predicted_slow(compiled, best, 1500.0)
    assert reason is not None and "not worth a compile" in reason, reason
    # A tenth faster over the run: both.
    gaining = compiling_profile(compile_s=30.0, ratio=1.1 + MIN_COMPILE_GAIN)
    assert any(c.compile != "off" for c in seeds(gaining, LONG_RUN, 100.0))
    assert judges(gaining, 100.0).predicted_slow(compiled, best, 1500.0) is None


def judges(profile: Profile, allowance: float) -> JobJudges:
    predictor = Predictor(profile, compile_space(), None)
    return JobJudges(predictor, cast(Any, None), LONG_RUN, lambda: allowance)


def test_a_proposal_whose_compile_outlasts_the_jobs_share_is_skipped() -> None:
    profile = compiling_profile(compile_s=40.0, ratio=2.0)
    best = Config(batch_size=64)
    compiled = Config(batch_size=64, compile="default")
    reason = judges(profile, 30.0).predicted_slow(compiled, best, 1500.0)
    assert reason is not None and "40 s" in reason and "30 s" in reason
    assert judges(profile, 50.0).predicted_slow(compiled, best, 1500.0) is None
    # The climb's neighbours too.
    assert judges(profile, 30.0).below_reach(compiled, best, 1500.0) is not None
    # A compile the job measured itself counts before the profile's.
    measured = judges(profile, 50.0)
    measured.compiled("default", 60.0)
    assert measured.predicted_slow(compiled, best, 1500.0) is not None


def plan() -> MeasurePlan:
    return MeasurePlan(3, 10, 3.0)


def test_a_compile_may_take_a_share_of_the_jobs_remaining_time() -> None:
    plain = TimeBudget(None, plan(), plan(), 3)
    # Without a time budget: the remaining trials and confirmation at the median trial.
    expected = TYPICAL_TRIAL_S * 20 + plain.confirm_estimate_s(4, TYPICAL_TRIAL_S)
    assert plain.compile_allowance_s(20, 4) == pytest.approx(COMPILE_SHARE * expected)
    # Compiling is charged against it, the profile's included, and trials' without theirs.
    plain.spent(None, 40.0)
    plain.spent(50.0, 40.0)
    assert plain.uncompiled_durations == [10.0]
    expected_after = TYPICAL_TRIAL_S * 19 + plain.confirm_estimate_s(4, 10.0) - 80.0
    assert plain.compile_allowance_s(19, 4) == pytest.approx(COMPILE_SHARE * expected_after)
    # Spent past what is left: nothing more may compile.
    plain.spent(None, 10_000.0)
    assert plain.compile_allowance_s(19, 4) == 0.0
    # With a time budget: a share of what it leaves.
    budgeted = TimeBudget(600.0, plan(), plan(), 3)
    budgeted.started = time.monotonic() - 200.0
    assert budgeted.compile_allowance_s(20, 4) == pytest.approx(COMPILE_SHARE * 400.0, rel=0.01)


def large_batch_space() -> SearchSpace:
    """Batches up to 2,048 and up to 16 workers with 16 batches ahead each, as a default space
    holds them on a dataset of a million samples."""
    return SearchSpace(
        CPU,
        TOKENS.model_copy(update={"dataset_length": 1_000_000}),
        fixed={"amp": "off", "intra_op_threads": None, "compile": "off"},
        ranges={
            "batch_size": "32,64,256,2048",
            "num_workers": "0,2,16",
            "prefetch_factor": "2,16",
        },
    )


def test_a_batch_the_step_sweep_never_reached_is_not_seeded() -> None:
    # The sweep stopped at 256; its rate carried to 2,048 with the loader fastest there makes
    # 2,048 the predicted best and the most uncertain: still no seed runs it.
    profile = make_profile({32: 300.0, 64: 500.0, 256: 600.0}, {0: 400.0, 2: 800.0, 16: 3000.0})
    space = large_batch_space()
    predictions = predict_space(profile, space)
    best = predictions.values(predictions.best(1)[0])
    assert best["batch_size"] == 2048
    assert not predictions.step_timed[predictions.best(1)[0]]
    chosen = seed_configs(predictions, space, 20, [space.baseline()])
    assert chosen and all(c.batch_size <= 256 for c in chosen)
    # Timed at 2,048, it is seeded.
    timed = make_profile(
        {32: 300.0, 64: 500.0, 256: 600.0, 2048: 650.0}, {0: 400.0, 2: 800.0, 16: 3000.0}
    )
    assert any(
        c.batch_size == 2048
        for c in seed_configs(predict_space(timed, space), space, 20, [space.baseline()])
    )


def test_a_trial_steps_for_its_warm_up_and_window_at_the_predicted_rate() -> None:
    profile = make_profile({32: 320.0, 2048: 640.0}, {0: 1e6, 16: 1e6})
    configs = [
        Config(batch_size=32),
        Config(batch_size=2048, num_workers=16, prefetch_factor=16),
    ]
    predicted = predict_configs(profile, configs)
    plan = MeasurePlan(warmup_steps=3, min_steps=10, min_seconds=3.0)
    seconds = trial_seconds(predicted, plan)
    small_step = 32 / predicted.samples_per_s[0]
    # Small: a warm-up of three steps, a window of its three seconds.
    assert seconds[0] == pytest.approx(3 * small_step + 3.0)
    # 2,048 with 16 workers: a warm-up held to its 5 s (the step takes over 3 s), then two
    # rounds of the workers, 32 steps.
    big_step = 2048 / predicted.samples_per_s[1]
    assert big_step > 3.0
    assert seconds[1] == pytest.approx(max(big_step, plan.max_warmup_s) + 32 * big_step)


def test_a_trial_predicted_to_take_over_its_share_of_the_job_is_neither_seeded_nor_run() -> None:
    profile = make_profile(
        {32: 300.0, 64: 500.0, 256: 600.0, 2048: 650.0}, {0: 400.0, 2: 800.0, 16: 3000.0}
    )
    space = large_batch_space()
    predictions = predict_space(profile, space)
    plan = MeasurePlan(3, 10, 3.0)
    # 2,048 with 16 workers steps 32 steps of over 3 s in its window alone: over 90 s.
    bounds = SeedBounds(plan=plan, trial_allowance_s=90.0)
    chosen = seed_configs(predictions, space, 20, [space.baseline()], bounds=bounds)
    assert chosen
    assert not any(c.batch_size == 2048 and c.num_workers == 16 for c in chosen)
    assert all(trial_seconds(predict_configs(profile, [c]), plan)[0] <= 90.0 for c in chosen)
    # The search's proposal too, whatever its predicted speed.
    predictor = Predictor(profile, space, None)
    big = Config(batch_size=2048, num_workers=16, prefetch_factor=16)
    judge = JobJudges(predictor, cast(Any, None), None, trial_allowance=(plan, lambda: 90.0))
    reason = judge.predicted_slow(big, Config(batch_size=64), 100.0)
    assert reason is not None and "90 s one trial may take" in reason
    generous = JobJudges(predictor, cast(Any, None), None, trial_allowance=(plan, lambda: 1e4))
    assert generous.predicted_slow(big, Config(batch_size=64), 100.0) is None


def optimizer_profile(impl_rate: float | None, error: str | None = None) -> Profile:
    """The compiling profile's step with a ``foreach`` optimizer timed at batch 32 at
    ``impl_rate`` samples/s against the default's 1,000."""
    timing = OptimizerPoint(
        impl="foreach",
        batch_size=32,
        amp="off",
        samples_per_s=impl_rate,
        default_samples_per_s=None if impl_rate is None else 1000.0,
        error=error,
    )
    profile = make_profile({32: 1000.0, 64: 2000.0, 128: 2000.0}, {0: 1e5, 2: 2e5})
    return profile.model_copy(update={"optimizer": [timing]})


def test_an_optimizer_implementation_is_a_column_of_seconds_saved_per_step() -> None:
    # At batch 32, foreach steps in 16 ms where the default takes 32: 16 ms saved a step.
    profile = optimizer_profile(2000.0)
    configs = [
        Config(batch_size=b, optimizer_impl=impl)
        for b in (32, 128)
        for impl in ("default", "foreach")
    ]
    rate = predict_configs(profile, configs).step_samples_per_s
    assert rate[1] == pytest.approx(2 * rate[0])
    # At 128 the default steps in 64 ms: the same 16 ms saved is a quarter of it.
    assert 128 / rate[3] == pytest.approx(128 / rate[2] - 0.016)
    # Accumulating over four micro-batches of 32, the optimizer steps once in four.
    accumulating = [
        Config(batch_size=32, grad_accum_steps=4, optimizer_impl=impl)
        for impl in ("default", "foreach")
    ]
    rate = predict_configs(profile, accumulating).step_samples_per_s
    assert 32 / rate[1] == pytest.approx(32 / rate[0] - 0.016 / 4)
    # Below the batch it was timed at, never more than the share it saved there.
    small = predict_configs(
        profile, [Config(batch_size=8), Config(batch_size=8, optimizer_impl="foreach")]
    ).step_samples_per_s
    assert small[1] == pytest.approx(2 * small[0])
    # Timed, it is a covered knob, a little less certain than the default.
    predicted = predict_configs(profile, configs[:2])
    assert predicted.uncovered_knobs(1) == frozenset()
    assert predicted.uncertainty[1] > predicted.uncertainty[0]


def test_an_implementation_the_profile_did_not_time_is_left_to_the_search() -> None:
    for profile in (
        make_profile({32: 1000.0, 64: 2000.0}, {0: 1e5}),
        optimizer_profile(None, error="RuntimeError: fused needs floating-point parameters"),
    ):
        predicted = predict_configs(
            profile, [Config(batch_size=64), Config(batch_size=64, optimizer_impl="foreach")]
        )
        assert predicted.samples_per_s[1] == predicted.samples_per_s[0]
        assert predicted.uncovered_knobs(1) == {"optimizer_impl"}
        assert predicted.uncertainty[1] > predicted.uncertainty[0]


def test_the_profile_plan_times_each_implementation_the_space_searches() -> None:
    with_impls = TOKENS.model_copy(update={"optimizer_impls": ("foreach", "fused")})
    space = SearchSpace(CPU, with_impls, fixed={"amp": "off"})
    plan = profile_plan(space, None, True, 40.0)
    assert list(plan.optimizer_impls) == ["foreach", "fused"]
    assert plan.timeout_s() == pytest.approx(40.0 + 2 * OPTIMIZER_OVERHEAD_S)
    fixed = SearchSpace(CPU, with_impls, fixed={"amp": "off", "optimizer_impl": "default"})
    assert list(profile_plan(fixed, None, True, 40.0).optimizer_impls) == []
    assert list(profile_plan(SearchSpace(CPU, TOKENS), None, True, 40.0).optimizer_impls) == []


def test_a_trials_compile_is_held_to_the_jobs_share_and_to_what_the_run_repays(
    tmp_path: Any,
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'autotune.db'}")
    run = _JobRun(db, 1, TuneOptions(workload="x"), Reporter(), threading.Event())
    run.run_samples = 4096
    compiled = Config(compile="default")
    # Before any trial: a quarter of 20 typical trials and the confirmation.
    share = run._compile_allowance()
    assert share == pytest.approx(COMPILE_SHARE * run.time.seconds_left(20, 4))
    assert run._trial_compile_allowance(compiled, "search", None) == share
    # Beside a best of 40,000 samples/s, a 4,096-sample run repays 0.2 s of compiling at most.
    assert run._trial_compile_allowance(compiled, "search", [40_000.0]) == pytest.approx(0.2048)
    # A run long enough to repay more is held to the share.
    run.run_samples = 10**9
    assert run._trial_compile_allowance(compiled, "search", [40_000.0]) == share
    # The share shrinks by what compiling has taken.
    run.time.spent(None, 100.0)
    assert run._compile_allowance() == pytest.approx(share - COMPILE_SHARE * 100.0)
    assert run._trial_compile_allowance(Config(), "search", None) is None
    assert run._trial_compile_allowance(compiled, "confirm", None) is None
    # --no-prune: no trial is stopped early, its compile included.
    unpruned = _JobRun(db, 1, TuneOptions(workload="x", prune=False), Reporter(), threading.Event())
    assert unpruned._trial_compile_allowance(compiled, "search", None) is None
