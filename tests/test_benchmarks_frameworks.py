"""benchmarks/frameworks.py's arithmetic: a run's length, its speed, the table's ratios."""

from __future__ import annotations

import pytest

from benchmarks.frameworks import WARMUP_STEPS, _steady, main, run_epochs, run_steps, table


def test_a_run_lasts_whole_epochs_the_first_and_as_many_as_hold_its_steps() -> None:
    # 384 steps of 32 from 16,384 images (512 an epoch): the first epoch and one timed.
    assert run_epochs(12288, 32, epoch_steps=512) == 2
    # 25 steps of 1536 (11 an epoch): the first epoch, then three.
    assert run_epochs(12288, 1536, epoch_steps=11) == 4
    assert run_steps(100, 32) == WARMUP_STEPS + 20  # never fewer than warm-up and 20 steps


def test_the_speed_counts_each_step_s_own_samples_after_the_warm_up() -> None:
    stamps = [float(i) for i in range(10)]
    samples = [32] * 9 + [8]  # a short last batch counts its 8, not 32
    expected = (32 * 3 + 8) / (9.0 - WARMUP_STEPS)
    assert _steady(stamps, samples, WARMUP_STEPS) == pytest.approx(expected)


def test_the_speed_of_a_run_of_whole_epochs_leaves_out_the_first_epoch() -> None:
    # Three epochs of three steps; the first is slow (start-up), the others take 1 s a step
    # but for each epoch's first step, which waits 2 s more for the workers' refill.
    gaps = [5.0, 5.0, 5.0, 3.0, 1.0, 1.0, 3.0, 1.0, 1.0]
    stamps = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    epochs = [0, 0, 0, 1, 1, 1, 2, 2, 2]
    speed = _steady(stamps, [10] * 9, WARMUP_STEPS, epochs)
    assert speed == pytest.approx(60 / 10.0)  # the refills counted, the first epoch not
    # Within the first epoch it falls back to the warm-up rule.
    assert _steady(stamps[:3], [10] * 3, 1, epochs[:3]) == pytest.approx(10 / 5.0)


def test_the_table_divides_the_claim_by_the_median_of_the_paired_ratios() -> None:
    result = {
        "framework": "Lightning Trainer",
        "tune_s": 120.0,
        "trials": 9,
        "baseline_config": {"batch_size": 32, "num_workers": 0},
        "config": {"batch_size": 256, "num_workers": 0},
        "claim": 2.2,
        "samples_per_s": {"baseline": [100.0, 110.0, 90.0], "recommended": [200.0, 220.0, 180.0]},
        "ratios": [2.0, 2.0, 2.0],
        "seen": 2.0,
    }
    row = table([result]).splitlines()[-1]
    assert "batch_size=256" in row and "num_workers" not in row
    assert "| 2.00x (2.00-2.00) | 2.20x | 1.10 |" in row


def test_an_unknown_framework_is_refused_with_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--framework", "keras"])
    assert exited.value.code == 2
    assert "choose from" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--rounds", "--run-samples", "--time-budget"])
def test_a_count_or_budget_that_is_not_positive_is_refused(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([option, "0"])
    assert exited.value.code == 2
    assert "0 is not positive; give a number above 0" in capsys.readouterr().err


def test_recommendations_must_match_the_frameworks_one_for_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--framework", "hf", "--recommendation", "a.json", "--recommendation", "b.json"])
    assert exited.value.code == 2
    assert "2 --recommendation for 1 frameworks; give one per --framework" in (
        capsys.readouterr().err
    )


def test_an_earlier_tune_is_shown_as_such_in_the_table() -> None:
    result = {
        "framework": "transformers Trainer",
        "tune_s": None,
        "trials": 22,
        "baseline_config": {},
        "config": {},
        "claim": 1.0,
        "samples_per_s": {"baseline": [1.0], "recommended": [1.0]},
        "ratios": [1.0],
        "seen": 1.0,
    }
    assert "| earlier tune, 22 trials | none |" in table([result])
