"""Confirmation: re-measure the best candidates and the baseline, interleaved, pick by median.

The confirmation is a race (as in F-Race, Birattari et al. 2002) held by
:class:`ConfirmationRace`. Each round runs the baseline and every candidate still racing once,
and after each round :meth:`ConfirmationRace.decide_next_round`, the one place that decides,
applies the race's rules in this order:

1. A candidate that can become neither answer (the fastest, or the fastest that keeps the
   baseline's effective batch) leaves, so that the rounds that decide are spent on the
   configurations still in contention. The baseline runs every round, since every speedup is
   paired with it.
2. From the second round on, the race ends early once both answers are decided: every
   candidate that no other outran in every round so far (paired) ran more than the margin
   faster than the baseline in every round, and, where the effective batch may change, so did
   every such candidate among those that keep it. Where several changed places between rounds
   (a plateau: batch sizes past the point where the step stops gaining, or worker counts
   around the loader's knee), a further round would order them by the noise that already
   reordered them, and each is a clear gain (evidence: ``benchmarks/log/``). A gain within
   the margin of the baseline still gets every round.
3. Neither answer is taken on medians of two runs whose two fastest changed places on a
   machine that moved: where one's two runs lie more than the margin apart, the race runs a
   third round instead of ending (early, or because two were all it was given), so that one
   run in a slow spell cannot pick.

Once the race ends, the winner is the fastest by the median of those that ran every round. A
winner that did not beat the baseline in every round is not taken on its median alone: it and
the baseline run a tie-break of as many paired rounds again, and it stays the recommendation
only if it was faster than the baseline in most of the paired rounds and on the median, since
a change that cannot show it is faster is not recommended over what the user runs today.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from autotune.recommend._runs import (
    CandidateRuns,
    Confirmation,
    behind,
    clearly_ahead,
    fastest,
    front,
    paired_ratios,
    reliably_faster,
    run_spread,
)
from autotune.space import Config
from autotune.store import TrialRecord

#: A candidate leaves the race once it ran more than this fraction slower than the leader in
#: every round so far (paired within each round, so a drift of the machine between rounds does
#: not count; one within a round can, hence :data:`MIN_ROUNDS_TO_LEAVE`). Three times a
#: confirmation run's run-to-run spread on a quiet machine (a CV of about 5%, see
#: ``benchmarks/RESULTS.md``), so that a candidate that close stays in.
RACE_MARGIN = 0.15
#: Rounds a candidate must trail by the margin before it leaves (F-Race likewise waits for a
#: few blocks before its first test): one round is no evidence on a shared machine, whose speed
#: drifts by tens of percent within a minute, so two configurations run one after the other
#: can change places from one round to the next.
MIN_ROUNDS_TO_LEAVE = 2

#: Runs one configuration in a fresh process; None when the job was cancelled meanwhile.
ConfirmFn = Callable[[Config], TrialRecord | None]


@dataclass(frozen=True)
class RacePlan:
    """What the confirmation re-measures, and for how long."""

    baseline: Config
    candidates: Sequence[Config]
    #: The rounds the race runs at most (one more where an answer is unsettled after them).
    rounds: int
    #: Samples in the user's run, which each run's compile time is charged against.
    run_samples: int | None = None
    race_margin: float = RACE_MARGIN
    #: Paired rounds of a tie-break: ``rounds`` where None, 0 for none.
    tie_break_rounds: int | None = None

    @property
    def tie_break_length(self) -> int:
        """Paired rounds of a tie-break, 0 for none."""
        return self.rounds if self.tie_break_rounds is None else self.tie_break_rounds


class RaceObserver(Protocol):
    """Told of the race's decisions as they are made."""

    def candidate_left(self, entry: CandidateRuns, runs_spared: int) -> None:
        """``entry`` left the race (see its ``left_because``), sparing it ``runs_spared``
        rounds."""

    def round_added(self, round_number: int, runs_added: int, reason: str) -> None:
        """The race goes on to round ``round_number``, which it would have skipped, adding
        ``runs_added`` runs beyond those planned (0 where the round was planned)."""

    def race_decided(self, rounds_run: int, runs_spared: int, reason: str) -> None:
        """The race ended after ``rounds_run`` rounds, before its last, sparing
        ``runs_spared`` runs."""

    def tie_break_started(self, config: Config, rounds: int) -> None:
        """The winner, ``config``, and the baseline start a tie-break of ``rounds`` paired
        rounds."""


class QuietObserver:
    """A :class:`RaceObserver` that is told nothing."""

    def candidate_left(self, entry: CandidateRuns, runs_spared: int) -> None:
        pass

    def round_added(self, round_number: int, runs_added: int, reason: str) -> None:
        pass

    def race_decided(self, rounds_run: int, runs_spared: int, reason: str) -> None:
        pass

    def tie_break_started(self, config: Config, rounds: int) -> None:
        pass


class ConfirmationRace:
    """The race's state: each configuration's runs, those still racing, and the rounds run.

    :meth:`run` runs rounds until :meth:`decide_next_round` ends the race, then picks the
    winner and, where it did not beat the baseline in every round, breaks the tie.
    """

    def __init__(
        self, plan: RacePlan, measure: ConfirmFn, observer: RaceObserver | None = None
    ) -> None:
        self.plan = plan
        self.measure = measure
        self.observer: RaceObserver = QuietObserver() if observer is None else observer
        self.baseline = CandidateRuns(plan.baseline, run_samples=plan.run_samples)
        self.candidates = [
            CandidateRuns(config, run_samples=plan.run_samples) for config in plan.candidates
        ]
        #: Those still in the race, the baseline first.
        self.racing: list[CandidateRuns] = [self.baseline, *self.candidates]
        self.rounds_run = 0
        #: The rounds the race may run: the plan's, and one more where its last left an
        #: answer unsettled.
        self.round_limit = plan.rounds
        self.decided_because: str | None = None
        self.added_round_because: str | None = None

    def run(self) -> Confirmation | None:
        """Race, pick the winner, break a tie; None when the job was cancelled."""
        while self.rounds_run < self.round_limit:
            if not self._run_round():
                return None
            if not self.decide_next_round():
                break
        return self._verdict()

    def decide_next_round(self) -> bool:
        """After a round, whether the race runs another: its rules, in the order they apply.

        1. Before the last round, the candidates that can become neither answer leave (see
           :meth:`_leaving`), and, from round :data:`MIN_ROUNDS_TO_LEAVE` on, the race ends
           if both answers are decided (see :meth:`_decided`); otherwise it goes on.
        2. Where the race would end, early or after its last round, it goes on for one round
           more, once, while an answer rests on medians of two runs that a moving machine
           ordered (see :meth:`_unsettled`); after the last round, that round is one beyond
           the plan, and the candidates that can become neither answer skip it.
        3. Otherwise it ends.
        """
        last = self.rounds_run == self.round_limit
        decided = None
        if not last:
            self._let_leave()
            if self.rounds_run >= MIN_ROUNDS_TO_LEAVE:
                decided = self._decided()
            if decided is None:
                return True
        if self.added_round_because is None:
            unsettled = self._unsettled()
            if unsettled is not None:
                self._add_round(unsettled, beyond_plan=last)
                return True
        if decided is not None:
            self.decided_because = decided
            spared = (self.round_limit - self.rounds_run) * len(self.racing)
            self.observer.race_decided(self.rounds_run, spared, decided)
        return False

    def _run_round(self) -> bool:
        """Run each configuration still racing once; False when cancelled."""
        for entry in round_order(self.racing, self.rounds_run):
            run = self.measure(entry.config)
            if run is None:
                return False
            entry.runs.append(run)
        self.rounds_run += 1
        return True

    def _let_leave(self) -> None:
        """Take the candidates that can become neither answer out of the race."""
        judge_speed = self.rounds_run >= MIN_ROUNDS_TO_LEAVE
        for entry, reason in self._leaving(judge_speed):
            entry.left_after_round, entry.left_because = self.rounds_run, reason
            self.observer.candidate_left(entry, self.round_limit - self.rounds_run)
        self.racing = [entry for entry in self.racing if entry.finished]

    def _add_round(self, reason: str, beyond_plan: bool) -> None:
        """Run one round more because ``reason``; past the plan's last where ``beyond_plan``."""
        self.added_round_because = reason
        added_runs = len(self.racing) if beyond_plan else 0
        self.observer.round_added(self.rounds_run + 1, added_runs, reason)
        if beyond_plan:
            self.round_limit += 1
            self._let_leave()

    def _verdict(self) -> Confirmation | None:
        """The winner, after a tie-break against the baseline where it did not beat it in
        every round; None when the job was cancelled during the tie-break."""
        base, tie_break_rounds = self.baseline, self.plan.tie_break_length
        winner = self._fastest_finisher()
        tried: CandidateRuns | None = None
        if (
            winner is not base
            and base.usable
            and tie_break_rounds > 0
            and min(paired_ratios(winner, base), default=0.0) <= 1.0
        ):
            tried = winner
            self.observer.tie_break_started(winner.config, tie_break_rounds)
            if not self._tie_break(winner, tie_break_rounds):
                return None
            if not (winner.usable and base.usable and reliably_faster(winner, base)):
                winner = base
        return Confirmation(
            baseline=base,
            candidates=self.candidates,
            winner=winner,
            paired_ratios=paired_ratios(winner, base) if winner is not base and base.usable else [],
            tie_break_rounds=0 if tried is None else tie_break_rounds,
            tie_break_candidate=tried,
            rounds_run=self.rounds_run,
            rounds_planned=self.plan.rounds,
            decided_because=self.decided_because,
            added_round_because=self.added_round_because,
        )

    def _fastest_finisher(self) -> CandidateRuns:
        """The usable candidate that ran every round with the highest median, where it is
        faster than the baseline's; else the baseline."""
        base = self.baseline
        usable = [entry for entry in self.candidates if entry.usable and entry.finished]
        winner = max(usable, key=lambda entry: entry.median_run_samples_per_s, default=base)
        if base.usable and winner.median_run_samples_per_s <= base.median_run_samples_per_s:
            return base
        return winner

    def _tie_break(self, winner: CandidateRuns, rounds: int) -> bool:
        """Measure ``winner`` and the baseline ``rounds`` more times each, alternating which
        runs first. False when cancelled."""
        for round_index in range(rounds):
            pair = (winner, self.baseline) if round_index % 2 else (self.baseline, winner)
            for entry in pair:
                run = self.measure(entry.config)
                if run is None:
                    return False
                entry.runs.append(run)
        return True

    def _keeping(self, entries: Sequence[CandidateRuns]) -> list[CandidateRuns]:
        """The entries that keep the baseline's effective batch (the drop-in answer)."""
        batch = self.baseline.config.effective_batch
        return [entry for entry in entries if entry.config.effective_batch == batch]

    def _leaving(self, judge_speed: bool) -> list[tuple[CandidateRuns, str]]:
        """The candidates that can become neither answer, and why.

        A candidate whose run failed leaves at once (it can no longer be usable). Once
        ``judge_speed`` (after :data:`MIN_ROUNDS_TO_LEAVE` rounds), one that ran more than the
        margin slower than the fastest in every round so far leaves, unless it keeps the
        baseline's effective batch and is not that far behind the fastest that does (it may
        still be the drop-in answer). The baseline never leaves.
        """
        margin = self.plan.race_margin
        usable = [entry for entry in self.racing if entry.usable]
        keeping = self._keeping(usable)
        leader = fastest(usable)
        leader_keeping = fastest(keeping)
        leaving = []
        for entry in self.racing:
            if entry is self.baseline:
                continue
            if not entry.usable:
                leaving.append((entry, f"a run ended {entry.runs[-1].outcome}"))
            elif (
                judge_speed
                and behind(entry, leader, margin)
                and (entry not in keeping or behind(entry, leader_keeping, margin))
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

    def _decided(self) -> str | None:
        """Why both answers are decided, or None while either is not.

        Decided when every candidate still racing that no other outran in every round so far
        (the front, see :func:`front`) ran more than the margin faster than the baseline in
        every round (where its runs are usable): whichever of them the medians pick is a clear
        gain, and their order is the noise's; and, among the candidates that keep the
        baseline's effective batch (the drop-in answer), the same holds of their front. A gain
        that close to the noise gets its last round, and the tie-break where it loses one. Also
        decided when only the baseline is left.
        """
        margin, base = self.plan.race_margin, self.baseline
        others = [entry for entry in self.racing if entry is not base]
        if not others:
            return "every candidate left, only the baseline is racing"
        keeping = self._keeping(others)
        leaders = front(others)
        if not all(clearly_ahead(entry, base, margin) for entry in leaders):
            return None
        if keeping and not all(clearly_ahead(entry, base, margin) for entry in front(keeping)):
            return None
        rounds = len(leaders[0].runs)
        if len(leaders) == 1:
            return (
                f"one candidate ran faster than every other in each of the {rounds} rounds, "
                f"and more than {margin:.0%} faster than the baseline"
            )
        return (
            f"{len(leaders)} candidates changed places between the {rounds} rounds and each ran "
            f"more than {margin:.0%} faster than the baseline in every round: further rounds "
            "would order them by the noise"
        )

    def _unsettled(self) -> str | None:
        """Why an answer would rest on a coin toss: the two fastest candidates by the median
        (of all, or of those that keep the baseline's effective batch) ran two rounds each,
        changed places between them (paired), and one's runs lie more than the margin apart;
        None where no answer does.

        A median of two runs is their mean, so one run made in a slow spell of the machine
        picks the other candidate (evidence: ``benchmarks/log/``); a third run of each makes
        medians that one slow run cannot decide. Where the runs lie closer than the margin,
        candidates that change places are one plateau, and their order is the noise's (see
        :meth:`_decided`).
        """
        margin = self.plan.race_margin
        others = [entry for entry in self.racing if entry is not self.baseline and entry.usable]
        for group in (others, self._keeping(others)):
            ranked = sorted(group, key=lambda entry: entry.median_run_samples_per_s, reverse=True)
            if len(ranked) < 2 or len(ranked[0].runs) != 2:
                continue
            first, second = ranked[:2]
            if behind(second, first, 0.0):
                continue
            spread = max(run_spread(first), run_spread(second))
            if spread > 1 + margin:
                return (
                    f"the two fastest{'' if group is others else ' that keep the effective batch'}"
                    f" changed places between the 2 rounds and one's runs lie {spread:.2f}x "
                    f"apart, more than the {margin:.0%} margin: on medians of two runs, one run "
                    "in a slow spell of the machine would pick"
                )
        return None


def round_order(racing: Sequence[CandidateRuns], index: int) -> list[CandidateRuns]:
    """The order of round ``index``: every other round the one before backwards, then
    rotated by one each pair of rounds, so that over two rounds each configuration runs once
    before and once after each other and a machine that speeds up or slows down steadily
    favours none (rotated alone, two rounds ran each candidate right before the next twice,
    favouring the one run first on a machine slowing down; evidence: ``benchmarks/log/``)."""
    shift = (index // 2) % len(racing)
    order = list(racing[shift:]) + list(racing[:shift])
    return order[::-1] if index % 2 else order


#: Told of a candidate the moment it leaves the race (its entry and the rounds it is spared).
LeaveFn = Callable[[CandidateRuns, int], None]
#: Told when the winner and the baseline start a tie-break (the winner's configuration, the
#: paired rounds added).
TieBreakFn = Callable[[Config, int], None]
#: Told when the race ends before its last round: the rounds run, the runs spared, and why.
DecidedFn = Callable[[int, int, str], None]
#: Told when the race goes on to a round it would have skipped: that round, the runs it adds
#: beyond those planned (0 where it was planned), and why.
RoundAddedFn = Callable[[int, int, str], None]


@dataclass(frozen=True)
class _Callbacks:
    """A :class:`RaceObserver` made of :func:`confirm`'s optional callbacks."""

    on_leave: LeaveFn | None = None
    on_tie_break: TieBreakFn | None = None
    on_decided: DecidedFn | None = None
    on_round_added: RoundAddedFn | None = None

    def candidate_left(self, entry: CandidateRuns, runs_spared: int) -> None:
        if self.on_leave is not None:
            self.on_leave(entry, runs_spared)

    def round_added(self, round_number: int, runs_added: int, reason: str) -> None:
        if self.on_round_added is not None:
            self.on_round_added(round_number, runs_added, reason)

    def race_decided(self, rounds_run: int, runs_spared: int, reason: str) -> None:
        if self.on_decided is not None:
            self.on_decided(rounds_run, runs_spared, reason)

    def tie_break_started(self, config: Config, rounds: int) -> None:
        if self.on_tie_break is not None:
            self.on_tie_break(config, rounds)


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
    """Measure baseline and candidates up to ``rounds`` times each in fresh processes: a
    :class:`ConfirmationRace` over a :class:`RacePlan`, told through optional callbacks.

    Each round runs every configuration still in the race once, in the order of
    :func:`round_order`, so slow drifts of the machine (thermal, other load) fall on all of
    them alike; between rounds :meth:`ConfirmationRace.decide_next_round` decides whether
    another runs. The winner is picked among those that ran every round, by its median
    throughput over a run of ``run_samples`` samples, compile time included, and goes to a
    tie-break of ``tie_break_rounds`` paired rounds (``rounds`` by default, 0 for none) where
    it did not beat the baseline in every round. Returns None when cancelled.
    """
    plan = RacePlan(
        baseline=baseline,
        candidates=tuple(candidates),
        rounds=rounds,
        run_samples=run_samples,
        race_margin=race_margin,
        tie_break_rounds=tie_break_rounds,
    )
    observer = _Callbacks(on_leave, on_tie_break, on_decided, on_round_added)
    return ConfirmationRace(plan, measure, observer).run()
