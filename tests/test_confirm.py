"""The confirmation: a race that stops re-measuring candidates that can no longer become an
answer, and a tie-break for a winner that did not beat the baseline in every round."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.recommend import confirm, pick_candidates
from autotune.recommend._batch import same_effective_batch_entry
from autotune.recommend._confirm import MIN_ROUNDS_TO_LEAVE, RACE_MARGIN
from autotune.recommend._document import (
    speedup_sentence,
    steadiness_sentence,
    widest_run_spread,
)
from autotune.recommend._pick import differing_knobs, plateau_twin
from autotune.recommend._runs import CandidateRuns
from autotune.space import AmpMode, Config
from autotune.store import TrialRecord

BASELINE = Config(batch_size=32)
SLEEPY = Path(__file__).parent / "workloads" / "sleepy.py"


def measured(speeds: Mapping[Config, Sequence[float | None]]):  # type: ignore[no-untyped-def]
    """A measure function that returns each configuration's next speed from ``speeds`` (None:
    the run ran out of memory), and the list of configurations it was asked for."""
    asked: list[Config] = []
    taken: dict[str, int] = defaultdict(int)

    def measure(config: Config) -> TrialRecord:
        asked.append(config)
        speed = speeds[config][taken[config.key()]]
        taken[config.key()] += 1
        if speed is None:
            return TrialRecord(config=config, outcome="oom")
        return TrialRecord(config=config, outcome="ok", samples_per_s=speed)

    return measure, asked


def test_of_two_prefetch_twins_among_the_best_only_the_faster_is_confirmed() -> None:
    # A text-transformer job confirmed batch 256 with 2 workers 4 and 8 ahead side by side:
    # two runs of one point, about 35 s of its confirmation.
    def run(config: Config, speed: float) -> TrialRecord:
        return TrialRecord(config=config, outcome="ok", samples_per_s=speed)

    ahead_4 = Config(batch_size=256, num_workers=2, prefetch_factor=4)
    ahead_8 = ahead_4.model_copy(update={"prefetch_factor": 8})
    three_workers = ahead_4.model_copy(update={"num_workers": 3})
    persistent = ahead_8.model_copy(update={"persistent_workers": True})
    no_workers = Config(batch_size=256)
    measured_runs = [
        run(ahead_4, 880),
        run(ahead_8, 894),
        run(three_workers, 870),
        run(persistent, 840),
        run(no_workers, 790),
        run(BASELINE, 500),
    ]
    assert pick_candidates(measured_runs, BASELINE, 3) == [ahead_8, three_workers]
    assert pick_candidates(measured_runs, BASELINE, 5) == [
        ahead_8,
        three_workers,
        persistent,
        no_workers,
    ]
    # PyTorch's default of 2 ahead is a prefetch like any other.
    default = ahead_4.model_copy(update={"prefetch_factor": None})
    assert pick_candidates([run(default, 900), run(ahead_4, 880)], BASELINE, 2) == [default]


def test_of_a_plateau_along_one_knob_the_runs_go_to_the_fastest_measured() -> None:
    # An image-cnn job on a 2-core Xeon confirmed batch 256, 384 and 512 (read 3,018, 3,001
    # and 3,001 by the search) three rounds each, and could not tell them apart.
    def run(config: Config, speed: float) -> TrialRecord:
        return TrialRecord(config=config, outcome="ok", samples_per_s=speed)

    plateau = Config(batch_size=256, channels_last=True, retain_freed_memory=True)
    wider = [plateau.model_copy(update={"batch_size": size}) for size in (384, 512)]
    behind = plateau.model_copy(update={"batch_size": 192})
    elsewhere = Config(batch_size=128, num_workers=2, amp="bf16")
    measured_runs = [
        run(plateau, 3018),
        run(wider[0], 3001),
        run(wider[1], 3001),
        run(elsewhere, 2950),
        run(behind, 2800),
        run(BASELINE, 1900),
    ]
    # A configuration more than one knob away (a second region of the space) is confirmed;
    # so is a neighbour read more than 5% behind, but the run it would take goes to the
    # plateau's neighbour read closest to its best.
    assert pick_candidates(measured_runs, BASELINE, 5) == [plateau, elsewhere, wider[0]]
    assert pick_candidates([run(plateau, 3018), run(behind, 2800)], BASELINE, 5) == [
        plateau,
        behind,
    ]
    assert pick_candidates(measured_runs, BASELINE, 3) == [plateau]
    # Read just outside the share, the neighbour is a finding of its own.
    apart = [run(plateau, 3018), run(wider[0], 0.94 * 3018)]
    assert pick_candidates(apart, BASELINE, 3) == [plateau, wider[0]]
    # Without workers and with them differ in the worker count alone: how the workers load
    # (prefetch, persistence) means nothing without them.
    main = Config(batch_size=192, amp="bf16", retain_freed_memory=True)
    workers = main.model_copy(
        update={"num_workers": 2, "prefetch_factor": 4, "persistent_workers": True}
    )
    assert pick_candidates([run(main, 551), run(workers, 542)], BASELINE, 3) == [main]
    assert pick_candidates([run(main, 542), run(workers, 551)], BASELINE, 3) == [workers]
    # Between two worker counts, a prefetch depth or persistence is a knob of its own.
    more = workers.model_copy(update={"num_workers": 3, "persistent_workers": False})
    assert pick_candidates([run(workers, 551), run(more, 542)], BASELINE, 3) == [workers, more]


def test_a_plateau_twin_takes_the_run_of_a_neighbour_read_further_behind_along_its_knob() -> None:
    # A big-batch job on a 2-core EPYC read batch 192 at 18,150 and 256 at 17,743, left 256
    # out as 192's twin and confirmed 128, read 6% behind: it picked 192, which the
    # interleaved grid put at 0.82 of 256.
    def run(config: Config, speed: float) -> TrialRecord:
        return TrialRecord(config=config, outcome="ok", samples_per_s=speed)

    best = Config(batch_size=192, amp="bf16", retain_freed_memory=True)
    twin, behind = (best.model_copy(update={"batch_size": size}) for size in (256, 128))
    other_knob = best.model_copy(update={"amp": "off"})
    runs = [run(best, 18150), run(twin, 17743), run(behind, 17050), run(other_knob, 16000)]
    assert pick_candidates(runs, BASELINE, 3) == [best, twin]
    assert pick_candidates(runs, BASELINE, 4) == [best, twin, other_knob]
    # A neighbour along another knob leaves the twin out.
    runs = [run(best, 18150), run(twin, 17743), run(other_knob, 17050)]
    assert pick_candidates(runs, BASELINE, 3) == [best, other_knob]


def test_two_peaks_with_a_dip_between_them_are_no_plateau() -> None:
    # An image-cnn job on a 2-core Xeon read batch 32 and 256 in bf16 at 3,508 and 3,506, and
    # batch 64 and 128 between them at 3,260 and 3,160: it left 256 out as 32's twin and
    # picked 32, which the suite's interleaved re-measurement put at 0.87x batch 256.
    def run(config: Config, speed: float) -> TrialRecord:
        return TrialRecord(config=config, outcome="ok", samples_per_s=speed)

    b32, b64, b128, b256 = (Config(batch_size=size, amp="bf16") for size in (32, 64, 128, 256))
    runs = [
        run(BASELINE, 2162),
        run(b256, 3506),
        run(b128, 3160),
        run(b32, 3508),
        run(b64, 3260),
        run(b32.model_copy(update={"num_workers": 1}), 2455),
    ]
    assert pick_candidates(runs, BASELINE, 2) == [b32, b256]
    # Flat between them: one plateau, the faster measured is confirmed.
    flat = [run(b256, 3506), run(b128, 3400), run(b32, 3508), run(b64, 3460)]
    assert pick_candidates(flat, BASELINE, 2) == [b32]
    # Another knob's points, or one outside the two, are not between them.
    apart = [
        run(b256, 3506),
        run(b32, 3508),
        run(b64.model_copy(update={"amp": "off"}), 2000),
        run(Config(batch_size=512, amp="bf16"), 2000),
    ]
    assert pick_candidates(apart, BASELINE, 2) == [b32]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([16, 32, 64, 128]),
            st.sampled_from([0, 2, 4]),
            st.sampled_from(["off", "bf16"]),
            st.floats(100, 200),
        ),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 6),
)
def test_each_left_out_is_a_twin_or_gave_its_run_to_a_neighbour_read_faster_along_a_knob(
    runs: list[tuple[int, int, AmpMode, float]], top: int
) -> None:
    records = [
        TrialRecord(
            config=Config(batch_size=size, num_workers=workers, amp=amp),
            outcome="ok",
            samples_per_s=speed,
        )
        for size, workers, amp, speed in runs
    ]
    picked = pick_candidates(records, BASELINE, top)
    speed: dict[str, float] = {}
    for record in records:
        key = record.config.key()
        speed[key] = max(speed.get(key, 0.0), record.samples_per_s or 0.0)
    config_of = {record.config.key(): record.config for record in records}
    ranked = sorted((k for k in speed if k != BASELINE.key()), key=speed.__getitem__, reverse=True)[
        :top
    ]

    def twins(slower: Config, faster: Config) -> bool:
        return ranked.index(faster.key()) < ranked.index(slower.key()) and plateau_twin(
            slower, speed[slower.key()], faster, speed[faster.key()]
        )

    def knob_between(one: Config, other: Config) -> set[str] | None:
        knobs = differing_knobs(one, other)
        return knobs if len(knobs) == 1 else None

    left_out = [config_of[key] for key in ranked if key not in {c.key() for c in picked}]
    assert len(picked) <= top and {c.key() for c in picked} <= set(ranked)

    def read_faster(one: Config, other: Config) -> bool:
        return ranked.index(one.key()) < ranked.index(other.key())

    def along_one_knob(one: Config, other: Config, of: Config) -> bool:
        return knob_between(one, of) is not None and knob_between(one, of) == knob_between(
            other, of
        )

    for out in left_out:
        # Left out as a twin of a faster one confirmed, or its run went to a neighbour
        # along the same knob read faster.
        assert any(twins(out, faster) for faster in picked) or any(
            read_faster(closer, out) and along_one_knob(closer, out, of)
            for closer in picked
            for of in picked
        )
        # Along a knob from a configuration confirmed, no neighbour read faster than one
        # confirmed is left out.
        assert not any(
            read_faster(of, out) and read_faster(out, kept) and along_one_knob(out, kept, of)
            for of in picked
            for kept in picked
        )


def test_a_candidate_far_behind_in_two_rounds_is_not_measured_again() -> None:
    fast, slow = Config(batch_size=64), Config(batch_size=128)
    measure, asked = measured(
        {BASELINE: [100, 101, 99], fast: [200, 210, 190], slow: [150, 170, 300]}
    )
    left: list[tuple[Config, int]] = []
    result = confirm(
        BASELINE,
        [fast, slow],
        3,
        measure,
        on_leave=lambda entry, saved: left.append((entry.config, saved)),
    )
    assert result is not None
    assert result.winner.config == fast
    assert left == [(slow, 1)]
    out = next(entry for entry in result.candidates if entry.config == slow)
    assert out.left_after_round == 2 and not out.finished
    assert out.left_because is not None and "15% slower than the fastest" in out.left_because
    # With bs 128 gone, bs 64 is ahead of all in both rounds and twice the baseline: decided.
    assert asked.count(slow) == 2 and asked.count(fast) == 2 and asked.count(BASELINE) == 2
    assert result.paired_ratios == [2.0, 210 / 101]


def test_the_race_ends_once_both_answers_are_decided() -> None:
    # bs 64 ran faster than bs 128 and more than 15% faster than the baseline in both rounds:
    # a third round could not change the pick by its median, and is not run.
    fast, second = Config(batch_size=64), Config(batch_size=128)
    measure, asked = measured(
        {BASELINE: [100, 100, 100], fast: [200, 190, 150], second: [180, 170, 250]}
    )
    told: list[tuple[int, int, str]] = []
    result = confirm(
        BASELINE, [fast, second], 3, measure, on_decided=lambda *args: told.append(args)
    )
    assert result is not None and result.winner.config == fast
    assert len(asked) == 6 and (result.rounds_run, result.rounds_planned) == (2, 3)
    assert result.decided_because is not None and told == [(2, 3, result.decided_because)]
    assert "faster than every other in each of the 2 rounds" in result.decided_because
    assert all(entry.finished for entry in result.candidates)


def test_a_plateau_of_clear_gains_that_change_places_is_decided_after_two_rounds() -> None:
    # text-transformer in bf16 past the batch where its step stops gaining: bs 256, 384 and
    # 512 each ran far faster than the baseline, and none led every round. A third round would
    # order them by the noise that already reordered them: not run; the medians pick.
    b256, b384, b512 = (Config(batch_size=size, amp="bf16") for size in (256, 384, 512))
    measure, asked = measured(
        {
            BASELINE: [250, 240, 245],
            b256: [460, 470, 500],
            b384: [480, 445, 420],
            b512: [455, 490, 450],
        }
    )
    told: list[tuple[int, int, str]] = []
    result = confirm(
        BASELINE, [b256, b384, b512], 3, measure, on_decided=lambda *args: told.append(args)
    )
    assert result is not None and (result.rounds_run, len(asked)) == (2, 8)
    assert result.winner.config == b512 and result.tie_break_rounds == 0
    assert told == [(2, 4, result.decided_because)]
    assert result.decided_because is not None and result.added_round_because is None
    assert "3 candidates changed places between the 2 rounds" in result.decided_because
    # One of them within 15% of the baseline in one round: the gain is not clear, all three
    # rounds run.
    measure, asked = measured(
        {
            BASELINE: [250, 240, 245],
            b256: [430, 470, 500],
            b384: [480, 270, 420],
            b512: [406, 568, 450],
        }
    )
    result = confirm(BASELINE, [b256, b384, b512], 3, measure)
    assert result is not None and (result.rounds_run, len(asked)) == (3, 12)
    assert result.decided_because is None


def test_two_fastest_that_change_places_on_a_moving_machine_get_a_third_round() -> None:
    # The plateau above, but bs 512's two runs lie 1.40x apart: on medians of two runs one
    # run in a slow spell picks, so the race is not decided after two; the third round, which
    # was planned, runs.
    b256, b384, b512 = (Config(batch_size=size, amp="bf16") for size in (256, 384, 512))
    measure, asked = measured(
        {
            BASELINE: [250, 240, 245],
            b256: [430, 470, 500],
            b384: [480, 410, 420],
            b512: [406, 568, 450],
        }
    )
    decided: list[tuple[int, int, str]] = []
    added: list[tuple[int, int, str]] = []
    result = confirm(
        BASELINE,
        [b256, b384, b512],
        3,
        measure,
        on_decided=lambda *args: decided.append(args),
        on_round_added=lambda *args: added.append(args),
    )
    assert result is not None and (result.rounds_run, len(asked)) == (3, 12)
    assert result.decided_because is None and decided == []
    assert result.added_round_because is not None
    assert added == [(3, 0, result.added_round_because)]
    assert "1.40x apart" in result.added_round_because
    assert result.winner.config == b256  # medians of three: 470 against 450 and 420


def test_a_two_round_race_on_a_moving_machine_adds_a_third_for_its_two_fastest() -> None:
    # A 2-core EPYC whose speed moved 1.35x within an image-cnn job: a two-round race took
    # batch 32 in bf16 (2,508 and 2,482 samples/s) over batch 128 (2,051 and 2,777) on the
    # medians of two. A third round runs; bs 64, far behind both in both rounds, leaves
    # before it.
    b32, b128, b64 = (Config(batch_size=size, amp="bf16") for size in (32, 128, 64))
    measure, asked = measured(
        {
            BASELINE: [1500, 1700, 1600],
            b32: [2508, 2482, 2450],
            b128: [2051, 2777, 2700],
            b64: [1800, 1900],
        }
    )
    added: list[tuple[int, int, str]] = []
    left: list[tuple[Config, int]] = []
    result = confirm(
        BASELINE,
        [b32, b128, b64],
        2,
        measure,
        on_round_added=lambda *args: added.append(args),
        on_leave=lambda entry, saved: left.append((entry.config, saved)),
    )
    assert result is not None and (result.rounds_run, result.rounds_planned) == (3, 2)
    assert len(asked) == 11 and asked.count(b64) == 2
    assert added == [(3, 4, result.added_round_because)] and left == [(b64, 1)]
    assert result.winner.config == b128
    # Runs within the margin of each other: the two changed places on a plateau, and the
    # medians of two pick (no round is added).
    measure, asked = measured(
        {BASELINE: [1500, 1700], b32: [2508, 2482], b128: [2451, 2577], b64: [1800, 1900]}
    )
    result = confirm(BASELINE, [b32, b128, b64], 2, measure)
    assert result is not None and result.rounds_run == 2 and len(asked) == 8
    assert result.added_round_because is None and result.winner.config == b128
    # The two that keep the baseline's effective batch (the drop-in answer) are judged alike.
    keep_a = Config(batch_size=16, amp="bf16", grad_accum_steps=2)
    measure, asked = measured(
        {
            BASELINE: [1500, 1700, 1600],
            b128: [4000, 4100, 4000],
            b32: [2508, 2482, 2450],
            keep_a: [2051, 2777, 2700],
        }
    )
    result = confirm(BASELINE, [b128, b32, keep_a], 2, measure)
    assert result is not None and result.rounds_run == 3
    assert result.added_round_because is not None
    assert "that keep the effective batch" in result.added_round_because
    assert same_effective_batch_entry(result).config == keep_a


def test_a_gain_within_the_margin_of_the_baseline_runs_every_round() -> None:
    # bs 64 led every round, but by no more than 15% over the baseline: the last round runs
    # (where it loses one, the tie-break follows).
    fast, second = Config(batch_size=64), Config(batch_size=128)
    measure, asked = measured(
        {BASELINE: [100, 100, 100], fast: [112, 114, 111], second: [105, 104, 106]}
    )
    result = confirm(BASELINE, [fast, second], 3, measure)
    assert result is not None and result.winner.config == fast
    assert len(asked) == 9 and result.rounds_run == 3 and result.decided_because is None


def test_one_round_far_behind_is_no_evidence() -> None:
    # Round 1 caught bs 128 in a slow moment of the machine; it stays and wins.
    fast, unlucky = Config(batch_size=64), Config(batch_size=128)
    measure, asked = measured(
        {BASELINE: [100, 100, 100], fast: [200, 200, 200], unlucky: [150, 260, 250]}
    )
    result = confirm(BASELINE, [fast, unlucky], 3, measure)
    assert result is not None
    out = next(entry for entry in result.candidates if entry.config == unlucky)
    assert out.finished and result.winner.config == unlucky
    # The two changed places and each doubled the baseline in both rounds, but bs 128's runs
    # lie 1.73x apart: the medians of two are not taken, the third round runs.
    assert asked.count(unlucky) == 3 and result.rounds_run == 3
    assert result.decided_because is None and result.added_round_because is not None


def test_a_candidate_within_the_margin_in_any_round_stays_to_the_end() -> None:
    fast, close = Config(batch_size=64), Config(batch_size=128)
    # Round 1: close is 10% behind; round 2: 25% behind. It did not trail by the margin in
    # every round, so it runs all three (and loses on the median); fast leads the baseline by
    # less than the margin, so two rounds do not decide the race.
    measure, asked = measured(
        {BASELINE: [100, 100, 100], fast: [110, 110, 110], close: [99, 82.5, 132]}
    )
    result = confirm(BASELINE, [fast, close], 3, measure)
    assert result is not None
    assert asked.count(close) == 3
    assert all(entry.finished for entry in result.candidates)
    assert result.winner.config == fast


def test_a_candidate_whose_run_fails_leaves_at_once() -> None:
    fast, crashing = Config(batch_size=64), Config(batch_size=512)
    measure, asked = measured({BASELINE: [100, 100], fast: [200, 200], crashing: [None, 500]})
    result = confirm(BASELINE, [fast, crashing], 2, measure)
    assert result is not None
    assert asked.count(crashing) == 1
    out = result.candidates[1]
    assert out.left_because == "a run ended oom" and not out.usable


def test_the_fastest_that_keeps_the_effective_batch_stays_for_the_drop_in_answer() -> None:
    # The baseline trains with 64 samples per step. bs 256 is far faster but changes it; bs 32 x
    # 2 accumulation steps keeps it and is the fastest that does, so it stays in although it
    # trails bs 256 by far. bs 16 x 4 keeps it too but is far behind bs 32 x 2: it leaves.
    baseline = Config(batch_size=64)
    bigger = Config(batch_size=256)
    keeping = Config(batch_size=32, grad_accum_steps=2)
    keeping_slower = Config(batch_size=16, grad_accum_steps=4)
    measure, asked = measured(
        {
            baseline: [100, 100, 100],
            bigger: [400, 400, 400],
            keeping: [110, 110, 110],
            keeping_slower: [90, 90, 90],
        }
    )
    result = confirm(baseline, [bigger, keeping, keeping_slower], 3, measure)
    assert result is not None
    # bs 32 x 2 leads the baseline by less than the margin: the race runs its third round.
    assert asked.count(keeping) == 3
    assert asked.count(keeping_slower) == 2
    assert result.winner.config == bigger
    assert same_effective_batch_entry(result).config == keeping
    # Of two that keep it, each led one round and each ran more than 15% faster than the
    # baseline in both: the drop-in answer is decided (by the medians) after two rounds.
    with_workers = Config(batch_size=64, num_workers=2)
    measure, asked = measured(
        {
            baseline: [100, 100, 100],
            bigger: [400, 400, 400],
            keeping: [130, 125, 131],
            with_workers: [128, 131, 127],
        }
    )
    result = confirm(baseline, [bigger, keeping, with_workers], 3, measure)
    assert result is not None and result.rounds_run == 2 and len(asked) == 8
    assert same_effective_batch_entry(result).config == with_workers
    # Where one of them ran within 15% of the baseline in a round, the drop-in answer is not
    # decided, so the third round runs although bs 256 won both clearly.
    measure, asked = measured(
        {
            baseline: [100, 100, 100],
            bigger: [400, 400, 400],
            keeping: [130, 125, 131],
            with_workers: [112, 131, 127],
        }
    )
    result = confirm(baseline, [bigger, keeping, with_workers], 3, measure)
    assert result is not None and result.rounds_run == 3 and len(asked) == 12
    assert same_effective_batch_entry(result).config == keeping


def test_the_last_round_drops_nobody_and_one_round_races_nothing() -> None:
    slow = Config(batch_size=128)
    measure, asked = measured({BASELINE: [100], slow: [10]})
    result = confirm(BASELINE, [slow], 1, measure)
    assert result is not None
    assert result.candidates[0].finished
    assert result.winner.config == BASELINE


def test_a_winner_that_lost_a_round_must_win_the_tie_break_or_the_baseline_stays() -> None:
    # bs 64 is ahead on the median of three rounds but lost round 2: it and the baseline run
    # three more paired rounds, of which it wins one; 2 of 6 is no evidence, the baseline stays.
    lucky = Config(batch_size=64)
    measure, asked = measured(
        {BASELINE: [100, 100, 100, 100, 100, 100], lucky: [110, 95, 104, 97, 99, 96]}
    )
    told: list[tuple[Config, int]] = []
    result = confirm(
        BASELINE,
        [lucky],
        3,
        measure,
        on_tie_break=lambda config, rounds: told.append((config, rounds)),
    )
    assert result is not None
    assert told == [(lucky, 3)]
    assert asked.count(lucky) == 6 and asked.count(BASELINE) == 6
    assert result.winner is result.baseline and result.within_noise
    assert result.tie_break_rounds == 3 and result.tie_break_candidate is result.candidates[0]
    assert result.paired_ratios == []
    assert sum(r > 1 for r in result.ratios_of(result.candidates[0])) == 2
    sentence = speedup_sentence(result)
    assert "faster than the baseline in only 2 of 6 paired rounds" in sentence
    assert "keep your current settings" in sentence


def test_a_tie_break_loser_is_not_the_drop_in_answer_either() -> None:
    # It keeps the baseline's effective batch and is ahead on the median of all six rounds,
    # but won only three of them: neither answer may recommend it.
    drop_in = Config(batch_size=32, num_workers=2)
    measure, _ = measured({BASELINE: [100] * 6, drop_in: [130, 95, 120, 99, 115, 98]})
    result = confirm(BASELINE, [drop_in], 3, measure)
    assert result is not None
    assert result.candidates[0].median_run_samples_per_s > result.baseline.median_run_samples_per_s
    assert result.lost_tie_break is result.candidates[0]
    assert result.winner is result.baseline
    assert same_effective_batch_entry(result) is result.baseline


def test_a_winner_that_lost_a_round_and_wins_most_of_the_tie_break_stays_flagged() -> None:
    close = Config(batch_size=64)
    measure, asked = measured(
        {BASELINE: [100, 100, 100, 100, 100, 100], close: [106, 98, 105, 104, 103, 99]}
    )
    result = confirm(BASELINE, [close], 3, measure)
    assert result is not None
    assert asked.count(close) == 6
    assert result.winner.config == close and result.within_noise
    assert len(result.paired_ratios) == 6
    assert "not reliably faster" in speedup_sentence(result)


def test_runs_of_one_configuration_far_apart_say_the_machine_s_speed_moved() -> None:
    # The winner beats the baseline in every paired round, but its own runs span 1.49x (a
    # machine whose speed moved between rounds): the verdict says so with the figures; runs
    # within 1.25x of each other say nothing.
    fast = Config(batch_size=64)
    measure, _ = measured({BASELINE: [1583, 1086, 1195], fast: [3864, 2600, 2601]})
    result = confirm(BASELINE, [fast], 3, measure)
    assert result is not None and result.winner.config == fast
    sentence = steadiness_sentence(result)
    assert "up to 1.49x apart (the recommendation: 2,600 to 3,864 samples/s)" in sentence
    spread = widest_run_spread(result)
    assert spread is not None and spread.entry is result.winner and spread.unsteady
    assert (spread.low, spread.high) == (2600, 3864)
    measure, _ = measured({BASELINE: [100, 110, 105], fast: [200, 240, 210]})
    result = confirm(BASELINE, [fast], 3, measure)
    assert result is not None and steadiness_sentence(result) == ""
    spread = widest_run_spread(result)
    assert spread is not None and not spread.unsteady and spread.ratio == pytest.approx(1.2)


def test_a_winner_ahead_in_every_round_needs_no_tie_break_and_none_can_be_asked() -> None:
    fast, close = Config(batch_size=64), Config(batch_size=128)
    measure, asked = measured({BASELINE: [100, 100], fast: [120, 118], close: [119, 90]})
    result = confirm(BASELINE, [fast, close], 2, measure)
    assert result is not None and result.tie_break_rounds == 0
    assert len(asked) == 6 and result.winner.config == fast and not result.within_noise
    # Without a tie-break (0 rounds) a winner that lost a round is picked on its median.
    measure, asked = measured({BASELINE: [100, 100, 100], close: [120, 90, 120]})
    result = confirm(BASELINE, [close], 3, measure, tie_break_rounds=0)
    assert result is not None and result.winner.config == close and result.within_noise
    assert len(asked) == 6


speeds_strategy = st.lists(st.floats(min_value=1.0, max_value=1000.0), min_size=3, max_size=3)


@settings(max_examples=200, deadline=None)
@given(
    table=st.lists(speeds_strategy, min_size=2, max_size=5),
    dominant=st.integers(min_value=0, max_value=3),
    margin=st.sampled_from([0.05, RACE_MARGIN]),
)
def test_race_invariants(table: list[list[float]], dominant: int, margin: float) -> None:
    """Whatever the speeds: a candidate at least as fast as every other in every round is never
    dropped and wins (when it beats the baseline); every candidate that left was behind the
    fastest by more than the margin in each round it ran; the race never measures more than the
    full rounds would."""
    configs = [BASELINE] + [Config(batch_size=64 * (i + 1)) for i in range(len(table) - 1)]
    dominant = 1 + dominant % (len(table) - 1)
    table[dominant] = [max(column) for column in zip(*table, strict=True)]
    speeds = dict(zip(configs, table, strict=True))
    measure, asked = measured(speeds)
    result = confirm(BASELINE, configs[1:], 3, measure, race_margin=margin, tie_break_rounds=0)
    assert result is not None
    assert len(asked) <= 3 * len(configs)
    entries: list[CandidateRuns] = [result.baseline, *result.candidates]
    assert result.baseline.finished and entries[dominant].finished
    if entries[dominant].median_run_samples_per_s > result.baseline.median_run_samples_per_s:
        assert result.winner.median_run_samples_per_s == entries[dominant].median_run_samples_per_s
    assert result.winner.finished
    if result.decided_because is not None:
        # Ended early: no candidate that ran every round outran the winner in each round, and
        # every one that no other outran so (the winner among them) ran more than the margin
        # faster than the baseline in each round.
        assert result.rounds_run == 2 and len(asked) < 3 * len(configs)
        finished = [e for e in result.candidates if e.finished]

        def speeds_of(entry: CandidateRuns) -> list[float]:
            return [run.samples_per_s or 0.0 for run in entry.runs]

        def outran(one: CandidateRuns, other: CandidateRuns) -> bool:
            return all(a > b for a, b in zip(speeds_of(one), speeds_of(other), strict=True))

        front = [e for e in finished if not any(outran(o, e) for o in finished if o is not e)]
        assert result.winner in front
        for entry in front:
            assert all(
                a > (1 + margin) * b
                for a, b in zip(speeds_of(entry), speeds_of(result.baseline), strict=True)
            )
        # Not on medians of two where the two fastest changed places on a moving machine.
        first, second = sorted(
            finished, key=lambda e: statistics.median(speeds_of(e)), reverse=True
        )[:2] + [None] * max(0, 2 - len(finished))
        if first is not None and second is not None and not outran(first, second):
            assert all(
                max(speeds_of(e)) <= (1 + margin) * min(speeds_of(e)) for e in (first, second)
            )
    if result.added_round_because is not None:
        assert result.rounds_run == 3 and result.decided_because is None
    for entry in result.candidates:
        if entry.finished:
            continue
        rounds = entry.left_after_round
        assert rounds is not None and len(entry.runs) == rounds
        assert rounds >= MIN_ROUNDS_TO_LEAVE
        for index in range(rounds):
            fastest = max(speeds[config][index] for config in configs)
            speed = entry.runs[index].samples_per_s
            assert speed is not None and speed < (1 - margin) * fastest


@settings(max_examples=200, deadline=None)
@given(
    base=st.lists(st.floats(min_value=50.0, max_value=150.0), min_size=4, max_size=4),
    other=st.lists(st.floats(min_value=50.0, max_value=150.0), min_size=4, max_size=4),
)
def test_a_recommended_change_beat_the_baseline_in_most_paired_rounds(
    base: list[float], other: list[float]
) -> None:
    """Whatever the speeds over 2 rounds and a 2-round tie-break: a winner other than the
    baseline beat it in every round, or in most rounds and on the median after the tie-break;
    and the tie-break ran exactly when the first two rounds left a doubt."""
    candidate = Config(batch_size=64)
    measure, asked = measured({BASELINE: base, candidate: other})
    result = confirm(BASELINE, [candidate], 2, measure)
    assert result is not None
    # Two rounds race nobody out (MIN_ROUNDS_TO_LEAVE).
    ahead_at_first = statistics.median(other[:2]) > statistics.median(base[:2])
    doubt = ahead_at_first and min(o / b for o, b in zip(other[:2], base[:2], strict=True)) <= 1
    assert result.tie_break_rounds == (2 if doubt else 0)
    assert len(asked) == (8 if doubt else 4)
    if result.winner is not result.baseline:
        ratios = result.paired_ratios
        assert all(r > 1.0 for r in ratios) or (
            len(ratios) == 4
            and sum(r > 1.0 for r in ratios) >= 3
            and statistics.median(other) > statistics.median(base)
        )


@pytest.mark.slow
def test_a_real_run_stops_re_measuring_a_candidate_far_behind(tmp_path: Path) -> None:
    # Every sample sleeps 20 ms: with batch 8, one worker reads no faster than the baseline's
    # main process (about 50 samples/s) and four read about four times as fast. The top two
    # candidates are 4 workers and 1 worker; the second trails by about 75% in two rounds and
    # leaves before the third, which then is not run: 4 workers led every round, by far.
    out = tmp_path / "best.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "autotune",
            "run",
            str(SLEEPY),
            "--range",
            "num_workers=0,1,4",
            "--fix",
            "batch_size=8",
            "--fix",
            "amp=off",
            "--fix",
            "persistent_workers=true",
            "--fix",
            "prefetch_factor=2",
            "--fix",
            "compile=off",
            "--fix",  # the three worker counts are the whole space: one trial each
            "optimizer_impl=default",
            "--fix",
            "in_order=true",
            "--no-profile",
            "--device",
            "cpu",
            "--fix",
            "retain_freed_memory=false",
            "--fix",
            "intra_op_threads=null",
            "--min-seconds",
            "0.5",
            "--min-steps",
            "3",
            "--warmup-steps",
            "1",
            "--confirm-top",
            "2",
            "--confirm-rounds",
            "3",
            "--trials",
            "3",
            "--db",
            f"sqlite:///{tmp_path / 'jobs.db'}",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(out.read_text())
    assert document["config"]["num_workers"] == 4
    by_workers = {c["config"]["num_workers"]: c for c in document["candidates"]}
    assert by_workers[4]["left_race"] is None and len(by_workers[4]["metrics"]["runs"]) == 2
    left = by_workers[1]["left_race"]
    assert left is not None and left["after_round"] == 2, by_workers[1]
    assert "slower than the fastest in every round" in left["because"]
    assert len(by_workers[1]["metrics"]["runs"]) == 2
    assert len(document["baseline"]["metrics"]["runs"]) == 2
    assert "out of the confirmation after round 2" in done.stderr
    assert "decided   after round 2" in done.stderr
    assert document["confirmation_rounds"]["run"] == 2
    assert document["confirmation_rounds"]["added"] is None  # 4 workers led every round
    assert document["confirmation_rounds"]["planned"] == 3
    assert document["trials"]["confirm"] == 6  # 2 x 3, not 3 x 3


def test_a_machine_that_slows_steadily_favours_no_configuration_over_two_rounds() -> None:
    """Three identical candidates and the baseline on a machine that loses 2 samples/s at
    each run: over two rounds each runs once before and once after each other, so their
    medians (of two runs, their mean) come out equal; rotated alone, each ran before the next
    in both rounds and read 2 samples/s faster."""
    calls = 0

    def measure(config: Config) -> TrialRecord:
        nonlocal calls
        calls += 1
        return TrialRecord(config=config, outcome="ok", samples_per_s=200.0 - 2.0 * calls)

    same = [Config(batch_size=64, num_workers=w) for w in (1, 2, 3)]
    result = confirm(BASELINE, same, 2, measure, tie_break_rounds=0)
    assert result is not None and result.rounds_run == 2
    medians = [entry.median_samples_per_s for entry in (result.baseline, *result.candidates)]
    assert medians == pytest.approx([191.0] * 4), medians
