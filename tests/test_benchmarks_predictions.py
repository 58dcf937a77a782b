"""``python -m benchmarks.predictions``: a real job's database, read back as a GPU session reads
its jobs' (the profile's prediction against each trial, the finalists against issue 8's band)."""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from benchmarks.predictions import TARGET_BAND, PredictionCheck, TrialTiming

ROOT = Path(__file__).resolve().parents[1]


def predictions(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.predictions", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def timing(
    phase: str,
    key: str,
    measured: float | None,
    predicted: float | None,
    scale: float | None = None,
) -> TrialTiming:
    return TrialTiming(phase, 1.0, 1.0, measured, predicted, key, key, scale)


def test_finalists_are_the_confirmed_candidates_each_by_the_median_of_its_runs() -> None:
    check = PredictionCheck.of(
        [
            timing("baseline", "base", 100.0, 200.0),
            timing("predicted", "a", 300.0, 250.0),
            timing("search", "b", 90.0, None),  # no prediction: not counted anywhere
            timing("confirm", "base", 100.0, 200.0),  # the baseline is the reference, no finalist
            timing("confirm", "a", 240.0, 250.0),
            timing("confirm", "a", 260.0, 250.0),
            timing("confirm", "a", 400.0, 250.0),
            timing("confirm", "c", 100.0, 250.0),
        ]
    )
    assert check.search == check.search_profile == [0.5, 300.0 / 250.0]
    assert [(f.summary, round(f.ratio, 3)) for f in check.finalists] == [("a", 1.04), ("c", 0.4)]
    assert check.finalists[0].job_ratios == [0.96, 1.04, 1.6]
    assert check.within == 1
    finalists = check.findings("w")[1]
    # The median decides; its runs' own spread is shown beside it (one run: nothing to show).
    assert "a (1.04, runs 0.96-1.60; profile alone 1.04); c (0.40; profile alone 0.40)" in finalists
    assert "1 of 2 within 0.85-1.15" in finalists
    assert "**NOT met**" in finalists
    # Every finalist inside the band (its edges included) meets it.
    low, high = TARGET_BAND
    edges = PredictionCheck.of(
        [timing("confirm", "a", low * 100, 100.0), timing("confirm", "b", high * 100, 100.0)]
    )
    assert edges.within == 2 and "2 of 2 within 0.85-1.15, met (" in edges.findings("w")[-1]


def test_the_job_s_prediction_is_the_profile_s_times_the_scale_stored_beside_it() -> None:
    check = PredictionCheck.of(
        [
            timing("baseline", "base", 100.0, 125.0),  # the first trial: no scale, the profile's
            timing("search", "b", 80.0, 100.0, 0.8),
            timing("confirm", "a", 240.0, 300.0, 0.8),
            timing("confirm", "a", 270.0, 300.0, 0.9),
            timing("confirm", "a", 250.0, 300.0, 1.0),
        ]
    )
    assert check.search == [0.8, 1.0] and check.search_profile == [0.8, 0.8]
    finalist = check.finalists[0]
    # Each run against its own scale, then the median: 1.0, 1.0, 0.833 -> 1.0; the profile's
    # alone 0.8, 0.9, 0.833 -> 0.833.
    assert finalist.ratio == pytest.approx(1.0)
    assert finalist.profile_ratio == pytest.approx(250.0 / 300.0)
    assert check.within == 1
    words = check.findings("w")
    assert "/ the job's prediction 0.90 (median; 0.80-1.00)" in words[0]
    assert "/ the profile's alone 0.80 (median; 0.80-0.80)" in words[0]
    assert "a (1.00, runs 0.83-1.00; profile alone 0.83)" in words[1]
    assert "1 of 1 within 0.85-1.15, met (0 on the profile's prediction alone)" in words[1]


def test_a_job_cut_before_its_confirmation_has_search_trials_only() -> None:
    check = PredictionCheck.of(
        [timing("baseline", "base", 100.0, 100.0), timing("search", "a", 150.0, 100.0)]
    )
    assert check.finalists == [] and len(check.findings("w")) == 1


@pytest.mark.slow
def test_a_real_job_is_read_back_trial_by_trial(tmp_path: Path, workload_file) -> None:
    db = tmp_path / "job.db"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            "run",
            workload_file("tiny"),
            "--trials",
            "4",
            "--db",
            str(db),
            "--device",
            "cpu",
            "--min-seconds",
            "0.3",
            "--min-steps",
            "3",
            "--warmup-steps",
            "1",
            "--confirm-top",
            "2",
            "--confirm-rounds",
            "2",
            "--profile-seconds",
            "2",
            "--fix",
            "compile=off",
            "--out",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    result = predictions(f"sqlite:///{db}")
    assert result.returncode == 0, result.stderr
    engine = create_engine(f"sqlite:///{db}")
    with engine.connect() as connection:
        trials = list(
            connection.execute(
                text(
                    "select phase, config_key, samples_per_s, predicted_samples_per_s * "
                    "coalesce(prediction_scale, 1), outcome, pruned from autotune_trials "
                    "order by number"
                )
            )
        )
        profile = [
            value
            for (value,) in connection.execute(
                text("select predicted_samples_per_s from autotune_trials order by number")
            )
        ]
    lines = result.stdout.splitlines()
    assert lines[0] == f"job 1: {len(trials)} trials"
    table = lines[2 : 2 + len(trials)]
    # One row per trial, in order, with the database's phase and its own ratios: measured /
    # the profile's prediction (m/p), then / the job's (m/job, the last figure).
    for row, (phase, _, measured, predicted, outcome, pruned), alone in zip(
        table, trials, profile, strict=True
    ):
        assert row.split()[1] == phase
        if outcome == "ok" and not pruned and measured and predicted:
            assert f" {f'{measured / alone:.2f}':>5} {f'{measured / predicted:.2f}':>5}  " in row
    assert any(
        phase != "confirm" and measured and predicted
        for phase, _, measured, predicted, _, _ in trials
    ), "no search trial predicted"
    baseline = next(key for phase, key, *_ in trials if phase == "baseline")
    confirmed = {key for phase, key, *_ in trials if phase == "confirm" and key != baseline}
    finalists = next(line for line in lines if "confirmed finalists" in line)
    assert f"within {TARGET_BAND[0]}-{TARGET_BAND[1]}" in finalists
    assert f" of {len(confirmed)} within" in finalists
    # Each finalist's figure is the median of its confirmation runs over the job's prediction.
    for key in confirmed:
        ratios = [
            m / p
            for phase, k, m, p, outcome, pruned in trials
            if phase == "confirm" and k == key and outcome == "ok" and not pruned and m
        ]
        value = statistics.median(ratios)
        spread = f", runs {min(ratios):.2f}-{max(ratios):.2f}" if len(ratios) > 1 else ""
        assert f"({value:.2f}{spread}; profile alone" in finalists


@pytest.mark.slow
@pytest.mark.parametrize(
    "make, phrase",
    [
        (lambda path: None, "no such SQLite file"),
        (lambda path: path.write_text("not a database"), "could not be read as autotune's"),
    ],
)
def test_a_wrong_database_is_one_clear_sentence(tmp_path: Path, make, phrase: str) -> None:
    path = tmp_path / "x.db"
    make(path)
    result = predictions(f"sqlite:///{path}")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and phrase in result.stderr
    assert "Traceback" not in result.stderr
