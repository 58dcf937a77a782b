"""The job's end: which searched configurations are confirmed against the baseline, the
interleaved confirmation (reusing runs an interrupted attempt stored), and what the
recommendation states beside the winner."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

from autotune.recommend import (
    CandidateRuns,
    Confirmation,
    confirm,
    keeping_effective_batch,
    pick_candidates,
)
from autotune.space import Config
from autotune.store import Trial, TrialRecord
from autotune.tuner._options import TuneOptions, format_mib
from autotune.tuner._reporter import Reporter


def confirmation_candidates(
    options: TuneOptions,
    searched: list[TrialRecord],
    baseline: Config,
    room: int | None,
    run_samples: int | None,
    accumulation_gain: Callable[[Config], float] | None,
) -> list[Config]:
    """The best searched configurations to confirm beside the baseline, as many as the
    options ask and the time budget leaves ``room`` for (None: no limit).

    The fastest that keeps the user's effective batch is confirmed too, so the recommendation
    can give it beside the fastest overall (unless the search held it), where the time budget
    leaves room for it.
    """
    top = options.confirm_top if room is None else min(options.confirm_top, room)
    candidates = pick_candidates(searched, baseline, top, run_samples)
    keeping = (
        None
        if options.effective_batch is not None
        else keeping_effective_batch(searched, baseline, run_samples, accumulation_gain)
    )
    if (
        keeping is not None
        and keeping.key() not in {c.key() for c in candidates}
        and (room is None or len(candidates) < room)
    ):
        candidates.append(keeping)
    return candidates


def confirm_against_baseline(
    baseline: Config,
    candidates: list[Config],
    stored: list[Trial],
    rounds: int,
    measure: Callable[[Config], TrialRecord | None],
    run_samples: int | None,
    reporter: Reporter,
) -> Confirmation | None:
    """Interleaved re-measurement of ``candidates`` and ``baseline`` over ``rounds``; the
    runs in ``stored`` (by an interrupted attempt) are reused before ``measure`` runs new
    ones. None when the job was cancelled meanwhile."""
    replay: dict[str, deque[TrialRecord]] = defaultdict(deque)
    for row in sorted(stored, key=lambda r: r.number):
        replay[row.config_key].append(TrialRecord.model_validate(row))

    def measure_once(config: Config) -> TrialRecord | None:
        if replay[config.key()]:
            return replay[config.key()].popleft()
        return measure(config)

    reporter.phase_started("confirm", (len(candidates) + 1) * rounds)

    def left(entry: CandidateRuns, runs_saved: int) -> None:
        assert entry.left_after_round is not None and entry.left_because is not None
        reporter.candidate_left(
            entry.config, entry.left_after_round, runs_saved, entry.left_because
        )

    return confirm(
        baseline,
        candidates,
        rounds,
        measure_once,
        run_samples,
        on_leave=left,
        on_tie_break=reporter.tie_break_started,
        on_decided=reporter.race_decided,
        on_round_added=reporter.round_added,
    )


def nothing_usable_message(searched: list[TrialRecord], memory_budget_bytes: int | None) -> str:
    """Why the search found nothing to confirm, and what to do about it."""
    if searched and all(m.outcome == "oom" for m in searched) and memory_budget_bytes is not None:
        return (
            f"every configuration tried exceeded the memory budget of "
            f"{format_mib(memory_budget_bytes)}; raise --max-memory or narrow --range batch_size"
        )
    outcomes = ", ".join(sorted({m.outcome for m in searched})) or "none measured"
    return (
        f"no configuration could be measured successfully (outcomes: {outcomes}); "
        "see the trials' errors and fix the workload"
    )


#: Why a confirmation leaves nothing to recommend.
NOTHING_STAYED_USABLE = (
    "no configuration stayed usable when re-measured (each failed, produced a "
    "non-finite loss or broke the memory budget); see the trials for their errors"
)


def memory_limited(winner: Config, searched: list[TrialRecord]) -> bool:
    """Whether a larger batch at the winner's precision ran out of memory."""
    return any(
        m.outcome == "oom"
        and m.config.amp == winner.amp
        and m.config.batch_size > winner.batch_size
        for m in searched
    )


def run_length(options: TuneOptions, run_samples: int | None) -> dict[str, Any]:
    """The run the recommendation is ranked for, as the document states it."""
    return {
        "samples": run_samples,
        "steps": options.steps,
        "epochs": None if options.steps is not None else options.epochs or 1,
    }
