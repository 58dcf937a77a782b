"""Confirmation: re-measure the best candidates and the baseline, interleaved, pick by median.

The confirmation is a race (as in F-Race, Birattari et al. 2002): after each round but the last,
from the second on, a candidate that cannot become either answer any more leaves it, so the
rounds that decide are spent on the configurations still in contention. The baseline runs
every round, since every speedup is paired with it.

The race also ends early, from the second round on, once both answers are decided: every
candidate that no other outran in every round so far (paired) ran more than the margin faster
than the baseline in every round, and, where the effective batch may change, so did every such
candidate among those that keep it. Where that is one candidate, it is ahead on the mean of two
and a further round would change the pick only if the machine turned against it there. Where
several changed places between rounds (a plateau: batch sizes past the point where the step
stops gaining, or worker counts around the loader's knee), a further round orders them by the
noise that already reordered them, and each is a clear gain over the baseline: on a 2-core EPYC
an image-cnn job's third round re-ran batch 192 with 2 workers and batch 96 with 3, which had
changed places at 1.7-1.8x the baseline, and the drop-in answer, 56 s of a 344 s job, to pick
what the first two rounds' medians picked (benchmarks/RESULTS.md 1b). A gain within the margin
of the baseline still gets every round (and the tie-break where it loses one).

Neither answer is taken on medians of two runs where its two fastest changed places on a
machine that moved: where one's two runs lie more than the margin apart, the race does not end
after two rounds (early, or because two were all it was given) but runs a third, so that one run
in a slow spell cannot pick (see ``_unsettled``).

A winner that did not beat the baseline in every round is not taken on its median alone: it and
the baseline run a tie-break of as many paired rounds again, and it stays the recommendation
only if it was faster than the baseline in most of the paired rounds and on the median. A
change that cannot show it is faster is not recommended over what the user runs today.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from autotune.space import Config
from autotune.store import TrialRecord

#: Runs one configuration in a fresh process; None when the job was cancelled meanwhile.
ConfirmFn = Callable[[Config], TrialRecord | None]
#: Told of a candidate the moment it leaves the race (its entry and the rounds it is spared).
LeaveFn = Callable[["CandidateRuns", int], None]
#: Told when the winner and the baseline start a tie-break (the winner's configuration, the
#: paired rounds added).
TieBreakFn = Callable[[Config, int], None]
#: Told when the race ends before its last round: the rounds run, the runs spared, and why.
DecidedFn = Callable[[int, int, str], None]
#: Told when the race goes on to a round it would have skipped (see :func:`_unsettled`): that
#: round, the runs it adds beyond those planned (0 where it was planned), and why.
RoundAddedFn = Callable[[int, int, str], None]

#: A candidate leaves the race once it ran more than this fraction slower than the leader in
#: every round so far (paired within each round, so a drift of the machine between rounds does
#: not count; one within a round can, hence :data:`MIN_ROUNDS_TO_LEAVE`). Three times the
#: run-to-run spread of a confirmation run on a quiet machine (CV about 5%,
#: benchmarks/RESULTS.md section 3): a candidate that close stays in.
RACE_MARGIN = 0.15
#: Rounds a candidate must trail by the margin before it leaves (F-Race likewise waits for a
#: few blocks before its first test). One round is no evidence on a shared machine: its speed
#: drifts by tens of percent over tens of seconds, so two configurations measured one after the
#: other can differ by 18% in one round and change places in the next.
MIN_ROUNDS_TO_LEAVE = 2


@dataclass
class CandidateRuns:
    config: Config
    runs: list[TrialRecord] = field(default_factory=list)
    #: Samples in the user's run, which each run's compile time is charged against.
    run_samples: int | None = None
    #: The round after which the candidate left the race, and why; None while it is in it.
    left_after_round: int | None = None
    left_because: str | None = None

    @property
    def finished(self) -> bool:
        """Ran every round: only such a candidate can be picked."""
        return self.left_after_round is None

    @property
    def usable(self) -> bool:
        """Every confirmation run finished ok, finite and within the budget."""
        return bool(self.runs) and all(run.usable for run in self.runs)

    @property
    def median_samples_per_s(self) -> float:
        """Steady-state throughput, compile time left out."""
        return statistics.median(run.samples_per_s or 0.0 for run in self.runs)

    @property
    def median_run_samples_per_s(self) -> float:
        """Throughput over the user's run, compile time included: what candidates are
        ranked by."""
        return statistics.median(self.over_run(run) for run in self.runs)

    def over_run(self, run: TrialRecord) -> float:
        return run.samples_per_s_over(self.run_samples) or 0.0

    def median_of(self, name: str) -> float | None:
        values = [getattr(run, name) for run in self.runs if getattr(run, name) is not None]
        return statistics.median(values) if values else None

    def max_of(self, name: str) -> int | None:
        values = [getattr(run, name) for run in self.runs if getattr(run, name) is not None]
        return max(values) if values else None


@dataclass
class Confirmation:
    """The re-measured candidates and the verdict."""

    baseline: CandidateRuns
    candidates: list[CandidateRuns]
    winner: CandidateRuns
    #: Per-round ratios winner / baseline (paired: measured in the same round).
    paired_ratios: list[float]
    #: Paired rounds the tie-break added (0 when the first winner beat the baseline in every
    #: round, or was the baseline); and the first winner it measured, kept or not (None
    #: without a tie-break).
    tie_break_rounds: int = 0
    tie_break_candidate: CandidateRuns | None = None
    #: Rounds the race ran (before any tie-break), of the most it could run, and why it ended
    #: before them (None when it ran them all).
    rounds_run: int = 0
    rounds_planned: int = 0
    decided_because: str | None = None
    #: Why the race ran a round it would have skipped (None when it did not).
    added_round_because: str | None = None

    @property
    def speedup(self) -> float | None:
        """Over the user's run, compile time included."""
        if not self.baseline.usable:
            return None
        return self.winner.median_run_samples_per_s / self.baseline.median_run_samples_per_s

    def ratios_of(self, entry: CandidateRuns) -> list[float]:
        """``entry`` / baseline per round (paired), over the user's run."""
        return _paired_ratios(entry, self.baseline)

    def rounds_won(self, entry: CandidateRuns) -> int:
        """Paired rounds in which ``entry`` ran faster than the baseline."""
        return _rounds_won(self.ratios_of(entry))

    @property
    def lost_tie_break(self) -> CandidateRuns | None:
        """The first winner, when its tie-break against the baseline showed it not reliably
        faster: no answer may recommend it."""
        tried = self.tie_break_candidate
        return tried if tried is not None and tried is not self.winner else None

    @property
    def within_noise(self) -> bool:
        """The winner did not beat the baseline in every round: the gain may be noise."""
        return (
            self.winner is self.baseline or not self.paired_ratios or min(self.paired_ratios) <= 1.0
        )


def pick_candidates(
    measured: Sequence[TrialRecord], baseline: Config, top: int, run_samples: int | None = None
) -> list[Config]:
    """Of the ``top`` fastest distinct usable configurations other than the baseline, by their
    throughput over a run of ``run_samples`` samples (compile time included), those that are
    not a twin of a faster one: its prefetch twin (see :func:`prefetch_twin`) or its plateau
    twin (see :func:`plateau_twin`).

    A plateau twin left out takes the run of a neighbour read further behind along the same
    knob, should one come up, and that neighbour is set aside in its turn: the plateau rule
    decides how many runs go along a knob, the search's readings which configurations get
    them, the fastest read first. On a 2-core EPYC a big-batch job's search read batch
    192 in bf16 at 18,150 samples/s and batch 256 at 17,743, and left 256 out as 192's twin,
    yet confirmed batch 128, read 6% behind: the confirmation picked 192, which the suite's
    interleaved grid put at 0.82 of 256 (benchmarks/RESULTS-misleading.md 1b)."""

    def speed(run: TrialRecord) -> float:
        return run.samples_per_s_over(run_samples) or 0.0

    readings: dict[str, TrialRecord] = {}
    for run in measured:
        key = run.config.key()
        if run.usable and (key not in readings or speed(run) > speed(readings[key])):
            readings[key] = run
    best = {key: run for key, run in readings.items() if key != baseline.key()}
    ranked = sorted(best.values(), key=speed, reverse=True)
    picked: list[TrialRecord] = []
    #: Plateau twins left out, and candidates whose run a twin took, fastest first.
    set_aside: list[TrialRecord] = []
    for run in ranked[:top]:
        if any(prefetch_twin(run.config, faster.config) for faster in picked):
            continue
        if any(
            plateau_twin(
                run.config,
                speed(run),
                faster.config,
                speed(faster),
                [
                    speed(between)
                    for between in readings.values()
                    if _lies_between(between.config, run.config, faster.config)
                ],
            )
            for faster in picked
        ):
            set_aside.append(run)
            continue
        closer = next(
            (aside for aside in set_aside if _along_one_knob(aside.config, run.config, picked)),
            None,
        )
        if closer is not None:
            set_aside.remove(closer)
            set_aside.append(run)
            run = closer
        picked.append(run)
    return [run.config for run in picked]


def _along_one_knob(one: Config, other: Config, picked: Sequence[TrialRecord]) -> bool:
    """Whether the two differ from one of ``picked`` in one knob, the same."""
    lines = {_line(one, faster.config) for faster in picked} - {None}
    return any(_line(other, faster.config) in lines for faster in picked)


def _line(config: Config, other: Config) -> tuple[str, str] | None:
    """``other`` and the knob ``config`` differs from it in, where that is one knob."""
    knobs = differing_knobs(config, other)
    return (other.key(), knobs.pop()) if len(knobs) == 1 else None


#: Two of the best measured that differ in one knob are one finding when the slower read at
#: least this share of the faster: within a trial's run-to-run spread (about 5%,
#: benchmarks/RESULTS.md section 3).
PLATEAU_SHARE = 0.95


def plateau_twin(
    config: Config, speed: float, other: Config, other_speed: float, between: Sequence[float] = ()
) -> bool:
    """Whether ``config`` differs from ``other``, measured faster, in one knob only and read
    within :data:`PLATEAU_SHARE` of it, as did every point measured between them along that
    knob (``between``, see :func:`_lies_between`): two points of one plateau of the space.

    The search's climb measures the best's neighbours along each knob, and where the speed is
    flat along one (batch sizes past the point where the step stops gaining), they fill the
    best measured. Confirming each costs a run per round and cannot tell them apart: on a
    2-core Xeon an image-cnn job confirmed batch 256, 384 and 512 without workers, read
    3,018, 3,001 and 3,001 samples/s by the search, in three rounds each (2,796-3,015,
    2,991-3,033 and 2,967-3,026), and, with no candidate ahead in every round, the race ran all
    its rounds: 15 runs, 108 s of its 181 s (benchmarks/RESULTS.md 1b). The faster measured
    is confirmed, at a loss of at most the gap the confirmation could not have shown. A
    neighbour read further behind along the same knob is confirmed as well, but the twin takes
    its run (see :func:`pick_candidates`); one that differs in more than one knob, where the
    search found a second region of the space, is confirmed.

    Loading in the main process and loading with workers differ in the worker count alone:
    the workers' own knobs (:data:`WORKER_KNOBS`) mean nothing without them. A 2-core EPYC's
    text-transformer job confirmed batch 192 without workers and with two, read 551 and 542
    samples/s by the search, in two rounds each (547-548 and 532-534): 16 s of its 85 s.

    Two peaks with a dip between them are no plateau: on a 2-core Xeon with AMX an image-cnn
    job's search read batch 32 and batch 256 in bf16 without workers at 3,508 and 3,506
    samples/s, and batch 64 and 128 between them at 3,260 and 3,160; it left batch 256 out as
    batch 32's twin and picked batch 32, which the suite's interleaved re-measurement put at
    0.87x batch 256 (benchmarks/RESULTS.md section 1, 2026-12-06, 07:11 UTC).
    """
    if other_speed <= 0 or speed < PLATEAU_SHARE * other_speed:
        return False
    if any(reading < PLATEAU_SHARE * other_speed for reading in between):
        return False
    return len(differing_knobs(config, other)) == 1


def _lies_between(config: Config, one: Config, other: Config) -> bool:
    """Whether ``config`` differs from ``one`` and ``other`` in the one numeric knob they
    differ in, and lies strictly between their values of it."""
    knobs = differing_knobs(one, other)
    if len(knobs) != 1 or differing_knobs(config, one) != knobs:
        return False
    knob = knobs.pop()
    low, high, value = (getattr(c, knob) for c in (one, other, config))
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high, value)):
        return False
    return min(low, high) < value < max(low, high)


#: Knobs of how workers load, which a configuration without workers does not use.
WORKER_KNOBS = frozenset({"prefetch_factor", "persistent_workers"})


def differing_knobs(config: Config, other: Config) -> set[str]:
    """The knobs the two set otherwise, leaving out :data:`WORKER_KNOBS` where either has no
    workers."""
    mine, theirs = config.public_dict(), other.public_dict()
    differ = {name for name in mine if mine[name] != theirs[name]}
    return differ - WORKER_KNOBS if not (config.num_workers and other.num_workers) else differ


def prefetch_twin(config: Config, other: Config) -> bool:
    """Whether the two differ in how many batches each worker queues ahead and in nothing else.

    Twins among the best measured are mostly one point of what the search found, and
    confirming both costs a run per round: on a 2-core EPYC an image-cnn job confirmed batch 512
    with 12 workers 16, 8 and 4 ahead, whose runs read 1,334-1,586, 1,514-1,608 and 1,431-1,673
    samples/s, 87 s of its 184 s of confirmation (benchmarks/RESULTS.md 1b). The faster measured
    of the two is confirmed: where twins do differ, the search's runs mostly say so already
    (slow-storage with 48 workers two ahead read 5,314 there, one ahead 3,872; confirmed,
    4,633-4,842 against 3,471-3,887). Where their gap is within the search's spread, the slower
    may be confirmed, at a loss of about that gap.
    """
    if config.num_workers == 0 or config.key() == other.key():
        return False
    unset = {"prefetch_factor": None}
    return config.model_copy(update=unset).key() == other.model_copy(update=unset).key()


def confirm(
    baseline: Config,
    candidates: Sequence[Config],
    rounds: int,
    measure: ConfirmFn,
    run_samples: int | None = None,
    race_margin: float = RACE_MARGIN,
    on_leave: LeaveFn | None = None,
    tie_break_rounds: int | None = None,
    on_tie_break: TieBreakFn | None = None,
    on_decided: DecidedFn | None = None,
    on_round_added: RoundAddedFn | None = None,
) -> Confirmation | None:
    """Measure baseline and candidates up to ``rounds`` times each in fresh processes.

    Each round runs every configuration still in the race once, every other round in the
    order of the round before backwards (see ``_round_order``), so slow drifts of the machine
    (thermal, other load) fall on all of them alike.
    Between rounds, candidates that can no longer win leave (see ``_leaving``), and the race
    ends once both answers are decided (see ``_decided``), unless an answer would rest on
    medians of two runs that a moving machine ordered (see ``_unsettled``): then one more round
    runs, beyond ``rounds`` where they were two. The winner is
    picked among those that ran every round, by its median throughput over a run of
    ``run_samples`` samples, compile time included. A winner that did not beat the baseline in
    every round goes to a tie-break against it (see ``_tie_break``; ``tie_break_rounds``
    paired rounds, ``rounds`` by default, 0 for none). Returns None when cancelled.
    """
    entries = [CandidateRuns(config, run_samples=run_samples) for config in (baseline, *candidates)]
    base, others = entries[0], entries[1:]
    racing = list(entries)
    rounds_run, limit, decided, added = 0, rounds, None, None

    def let_leave() -> list[CandidateRuns]:
        judge = rounds_run >= MIN_ROUNDS_TO_LEAVE
        for entry, reason in _leaving(racing, base, race_margin, judge_speed=judge):
            entry.left_after_round, entry.left_because = rounds_run, reason
            if on_leave is not None:
                on_leave(entry, limit - rounds_run)
        return [entry for entry in racing if entry.finished]

    while rounds_run < limit:
        for entry in _round_order(racing, rounds_run):
            run = measure(entry.config)
            if run is None:
                return None
            entry.runs.append(run)
        rounds_run += 1
        last = rounds_run == limit
        if not last:
            racing = let_leave()
            decided = (
                _decided(racing, base, race_margin) if rounds_run >= MIN_ROUNDS_TO_LEAVE else None
            )
            if decided is None:
                continue
        # The race would end here.
        if added is None and (added := _unsettled(racing, base, race_margin)) is not None:
            decided = None
            if on_round_added is not None:
                on_round_added(rounds_run + 1, len(racing) if last else 0, added)
            if last:  # one round more, which those that can become neither answer skip
                limit += 1
                racing = let_leave()
            continue
        if decided is not None and on_decided is not None:
            on_decided(rounds_run, (limit - rounds_run) * len(racing), decided)
        break
    usable = [entry for entry in others if entry.usable and entry.finished]
    winner = max(usable, key=lambda entry: entry.median_run_samples_per_s, default=base)
    if base.usable and winner.median_run_samples_per_s <= base.median_run_samples_per_s:
        winner = base
    extra = rounds if tie_break_rounds is None else tie_break_rounds
    tried, tie_broken = None, 0
    if (
        winner is not base
        and base.usable
        and extra > 0
        and min(_paired_ratios(winner, base), default=0.0) <= 1.0
    ):
        tried, tie_broken = winner, extra
        if on_tie_break is not None:
            on_tie_break(winner.config, extra)
        if not _tie_break(winner, base, extra, measure):
            return None
        if not (winner.usable and base.usable and _reliably_faster(winner, base)):
            winner = base
    ratios = _paired_ratios(winner, base) if winner is not base and base.usable else []
    return Confirmation(
        baseline=base,
        candidates=others,
        winner=winner,
        paired_ratios=ratios,
        tie_break_rounds=tie_broken,
        tie_break_candidate=tried,
        rounds_run=rounds_run,
        rounds_planned=rounds,
        decided_because=decided,
        added_round_because=added,
    )


def _round_order(racing: Sequence[CandidateRuns], index: int) -> list[CandidateRuns]:
    """The order of round ``index``: every other round the one before backwards, then
    rotated by one each pair of rounds, so that over two rounds each configuration runs once
    before and once after each other and a machine that speeds up or slows down steadily
    favours none. Rotated alone, two rounds ran each candidate right before the next twice:
    on a 2-core Xeon a default image-cnn job confirmed batch 384 before batch 192 in both of
    its rounds (4,389 and 4,470 samples/s against 4,211 and 4,272), the baseline slowing 10%
    from its first run to its last."""
    shift = (index // 2) % len(racing)
    order = list(racing[shift:]) + list(racing[:shift])
    return order[::-1] if index % 2 else order


def _decided(racing: Sequence[CandidateRuns], baseline: CandidateRuns, margin: float) -> str | None:
    """Why both answers are decided, or None while either is not.

    Decided when every candidate still racing that no other outran in every round so far (the
    front, see :func:`_front`) ran more than ``margin`` faster than the baseline in every round
    (where its runs are usable): whichever of them the medians pick is a clear gain, and their
    order is the noise's; and, among the candidates that keep the baseline's effective batch
    (the drop-in answer), the same holds of their front. A gain that close to the noise gets
    its last round, and the tie-break where it loses one. Also decided when only the baseline
    is left.
    """
    others = [entry for entry in racing if entry is not baseline]
    if not others:
        return "every candidate left, only the baseline is racing"
    keeping = [
        entry for entry in others if entry.config.effective_batch == baseline.config.effective_batch
    ]
    front = _front(others)
    if not all(_clearly_ahead(entry, baseline, margin) for entry in front):
        return None
    if keeping and not all(_clearly_ahead(entry, baseline, margin) for entry in _front(keeping)):
        return None
    rounds = len(front[0].runs)
    if len(front) == 1:
        return (
            f"one candidate ran faster than every other in each of the {rounds} rounds, "
            f"and more than {margin:.0%} faster than the baseline"
        )
    return (
        f"{len(front)} candidates changed places between the {rounds} rounds and each ran "
        f"more than {margin:.0%} faster than the baseline in every round: further rounds "
        "would order them by the noise"
    )


def _unsettled(
    racing: Sequence[CandidateRuns], baseline: CandidateRuns, margin: float
) -> str | None:
    """Why an answer would rest on a coin toss: the two fastest candidates by the median (of
    all, or of those that keep the baseline's effective batch) ran two rounds each, changed
    places between them (paired), and one's runs lie more than ``margin`` apart; None where
    no answer does.

    A median of two runs is their mean: one run made in a slow spell of the machine picks the
    other candidate. On a 2-core EPYC whose speed moved 1.35x within an image-cnn job, a
    two-round race took batch 32 in bf16 (runs 2,508 and 2,482 samples/s) over batch 128 in
    bf16 (2,051 and 2,777); the suite's interleaved re-measurement put the pick at 0.79x the
    grid's best (benchmarks/RESULTS.md section 1 as of f9eb9e9). A third run of each makes
    medians that one slow run cannot decide. Where the runs lie closer than the margin,
    candidates that change places are one plateau, and their order is the noise's
    (:func:`_decided`).
    """
    others = [entry for entry in racing if entry is not baseline and entry.usable]
    keeping = [
        entry for entry in others if entry.config.effective_batch == baseline.config.effective_batch
    ]
    for group in (others, keeping):
        ranked = sorted(group, key=lambda entry: entry.median_run_samples_per_s, reverse=True)
        if len(ranked) < 2 or len(ranked[0].runs) != 2:
            continue
        first, second = ranked[:2]
        if _behind(second, first, 0.0):
            continue
        spread = max(_run_spread(first), _run_spread(second))
        if spread > 1 + margin:
            return (
                f"the two fastest{'' if group is others else ' that keep the effective batch'}"
                f" changed places between the 2 rounds and one's runs lie {spread:.2f}x "
                f"apart, more than the {margin:.0%} margin: on medians of two runs, one run "
                "in a slow spell of the machine would pick"
            )
    return None


def _run_spread(entry: CandidateRuns) -> float:
    """The fastest of ``entry``'s runs over its slowest, over the user's run."""
    speeds = [entry.over_run(run) for run in entry.runs]
    return max(speeds) / min(speeds) if min(speeds) > 0 else float("inf")


def _clearly_ahead(entry: CandidateRuns, baseline: CandidateRuns, margin: float) -> bool:
    """More than ``margin`` faster than ``baseline`` in every round (paired); True where the
    baseline's runs are not usable (nothing to compare with)."""
    return not baseline.usable or all(
        ratio > 1 + margin for ratio in _paired_ratios(entry, baseline)
    )


def _front(entries: Sequence[CandidateRuns]) -> list[CandidateRuns]:
    """The entries of ``entries`` that no other ran faster than in every round (paired).

    The fastest by the median is always among them (a candidate outrun in every round has
    the lower median too); where there are several, each ran at least as fast as every other
    in some round.
    """
    return [entry for entry in entries if not any(_behind(entry, other, 0.0) for other in entries)]


def _paired_ratios(entry: CandidateRuns, baseline: CandidateRuns) -> list[float]:
    """``entry`` / ``baseline`` per round, over the user's run (paired within each round)."""
    return [
        entry.over_run(mine) / baseline.over_run(theirs)
        for mine, theirs in zip(entry.runs, baseline.runs, strict=True)
        if baseline.over_run(theirs)
    ]


def _rounds_won(ratios: Sequence[float]) -> int:
    return sum(ratio > 1.0 for ratio in ratios)


def _tie_break(
    winner: CandidateRuns, baseline: CandidateRuns, rounds: int, measure: ConfirmFn
) -> bool:
    """Measure ``winner`` and ``baseline`` ``rounds`` more times each, alternating which runs
    first. False when cancelled."""
    for round_index in range(rounds):
        pair = (winner, baseline) if round_index % 2 else (baseline, winner)
        for entry in pair:
            run = measure(entry.config)
            if run is None:
                return False
            entry.runs.append(run)
    return True


def _reliably_faster(winner: CandidateRuns, baseline: CandidateRuns) -> bool:
    """Faster than the baseline in more than half of the paired rounds, and on the median."""
    ratios = _paired_ratios(winner, baseline)
    return (
        2 * _rounds_won(ratios) > len(ratios)
        and winner.median_run_samples_per_s > baseline.median_run_samples_per_s
    )


def _leaving(
    racing: Sequence[CandidateRuns],
    baseline: CandidateRuns,
    margin: float,
    judge_speed: bool = True,
) -> list[tuple[CandidateRuns, str]]:
    """The candidates that can become neither answer, and why.

    A candidate whose run failed leaves at once (it can no longer be usable). Once
    ``judge_speed`` (after :data:`MIN_ROUNDS_TO_LEAVE` rounds), one that ran more than
    ``margin`` slower than the fastest in every round so far leaves, unless it keeps the
    baseline's effective batch and is not that far behind the fastest that does (it may still
    be the drop-in answer). The baseline never leaves.
    """
    usable = [entry for entry in racing if entry.usable]
    keeping = [
        entry for entry in usable if entry.config.effective_batch == baseline.config.effective_batch
    ]
    leader = _fastest(usable)
    leader_keeping = _fastest(keeping)
    leaving = []
    for entry in racing:
        if entry is baseline:
            continue
        if not entry.usable:
            leaving.append((entry, f"a run ended {entry.runs[-1].outcome}"))
        elif (
            judge_speed
            and _behind(entry, leader, margin)
            and (entry not in keeping or _behind(entry, leader_keeping, margin))
        ):
            assert leader is not None
            leaving.append(
                (
                    entry,
                    (
                        f"more than {margin:.0%} slower than the fastest in every round "
                        f"({entry.median_run_samples_per_s:,.1f} against "
                        f"{leader.median_run_samples_per_s:,.1f} samples/s, medians)"
                    ),
                )
            )
    return leaving


def _fastest(entries: Sequence[CandidateRuns]) -> CandidateRuns | None:
    return max(entries, key=lambda entry: entry.median_run_samples_per_s, default=None)


def _behind(entry: CandidateRuns, leader: CandidateRuns | None, margin: float) -> bool:
    """Slower than ``leader`` by more than ``margin`` in every round both ran (paired)."""
    if leader is None or leader is entry:
        return False
    return all(
        entry.over_run(mine) < (1 - margin) * leader.over_run(theirs)
        for mine, theirs in zip(entry.runs, leader.runs, strict=True)
    )
