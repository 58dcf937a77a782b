"""The recommendation JSON: what the tuner found, with its evidence."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from autotune.predict import Profile
from autotune.recommend._batch import batch_answers, batch_sentence
from autotune.recommend._diagnosis import TrialView, diagnose
from autotune.recommend._document_model import SCHEMA, RecommendationDocument
from autotune.recommend._export import exports, launch_exports
from autotune.recommend._runs import CandidateRuns, Confirmation
from autotune.space import Config, DeviceInfo
from autotune.store import TrialRecord


def _metrics(entry: CandidateRuns) -> dict[str, Any]:
    return {
        # Steady state; over the run, compile time is charged (what the ranking uses).
        "samples_per_s": entry.median_samples_per_s,
        "run_samples_per_s": entry.median_run_samples_per_s,
        "compile_s": entry.median_of("compile_s"),
        "step_time_ms": entry.median_of("step_time_median_ms"),
        "peak_memory_bytes": entry.max_of("peak_memory_bytes"),
        "peak_host_memory_bytes": entry.max_of("peak_host_memory_bytes"),
        "data_wait_fraction": entry.median_of("data_wait_fraction"),
        "device_utilization": entry.median_of("device_utilization"),
        "runs": [run.samples_per_s for run in entry.runs],
    }


def _view(entry: CandidateRuns) -> TrialView:
    return TrialView(
        config=entry.config,
        outcome="ok" if entry.usable else entry.runs[-1].outcome if entry.runs else "error",
        samples_per_s=entry.median_samples_per_s,
        data_wait_fraction=entry.median_of("data_wait_fraction"),
        peak_memory_bytes=entry.max_of("peak_memory_bytes"),
        device_utilization=entry.median_of("device_utilization"),
    )


def speedup_sentence(confirmation: Confirmation) -> str:
    """The verdict in one sentence, saying plainly when it is within noise."""
    speedup = confirmation.speedup
    if speedup is None:
        return (
            "The baseline itself failed or broke the memory budget when re-measured, so no "
            "speedup over it can be given."
        )
    lost = confirmation.lost_tie_break
    if lost is not None:
        ratios = confirmation.ratios_of(lost)
        return (
            f"The fastest candidate was faster than the baseline in only "
            f"{confirmation.rounds_won(lost)} of "
            f"{len(ratios)} paired rounds (median {statistics.median(ratios):.2f}x), which "
            "is within the noise of this machine; keep your current settings."
        )
    if confirmation.winner is confirmation.baseline:
        return (
            "No candidate beat the baseline when re-measured side by side; keep your "
            "current settings."
        )
    ratios = confirmation.paired_ratios
    spread = f" (per-round ratios {min(ratios):.2f}x to {max(ratios):.2f}x)" if ratios else ""
    if confirmation.within_noise:
        return (
            f"The recommendation measured {speedup:.2f}x the baseline{spread}, which is "
            "within the noise of this machine: it is not reliably faster."
        )
    return f"The recommendation is {speedup:.2f}x faster than the baseline{spread}."


#: A configuration whose confirmation runs measured this far apart (its fastest over its
#: slowest) says the machine's own speed moved while the job ran: on a quiet machine a run's
#: spread is a CV of about 5%, so three runs rarely span more than 1.15x (evidence:
#: ``benchmarks/RESULTS.md``; machines whose speed moved: ``benchmarks/log/``).
UNSTEADY_SPREAD = 1.25


@dataclass(frozen=True)
class RunSpread:
    """The widest spread of one configuration's confirmation runs."""

    entry: CandidateRuns
    low: float
    high: float

    @property
    def ratio(self) -> float:
        return self.high / self.low

    @property
    def unsteady(self) -> bool:
        return self.ratio >= UNSTEADY_SPREAD


def widest_run_spread(confirmation: Confirmation) -> RunSpread | None:
    """Among the baseline and the candidates with two usable runs or more, the one whose runs
    lie furthest apart; None when none has two."""
    widest: RunSpread | None = None
    for entry in (confirmation.baseline, *confirmation.candidates):
        rates = [run.samples_per_s for run in entry.runs if run.usable and run.samples_per_s]
        if len(rates) < 2:
            continue
        spread = RunSpread(entry, min(rates), max(rates))
        if widest is None or spread.ratio > widest.ratio:
            widest = spread
    return widest


def _run_spread_entry(confirmation: Confirmation) -> dict[str, Any] | None:
    spread = widest_run_spread(confirmation)
    if spread is None:
        return None
    return {
        "config": spread.entry.config.public_dict(),
        "min": spread.low,
        "max": spread.high,
        "ratio": spread.ratio,
        "unsteady": spread.unsteady,
    }


def steadiness_sentence(confirmation: Confirmation) -> str:
    """A sentence when the machine's speed moved during the confirmation (the widest spread
    of one configuration's runs reached :data:`UNSTEADY_SPREAD`); empty otherwise."""
    spread = widest_run_spread(confirmation)
    if spread is None or not spread.unsteady:
        return ""
    which = (
        "the baseline"
        if spread.entry is confirmation.baseline
        else "the recommendation"
        if spread.entry is confirmation.winner
        else "a candidate"
    )
    return (
        f" This machine's speed moved while the job ran: one configuration's runs "
        f"measured up to {spread.ratio:.2f}x apart ({which}: {spread.low:,.0f} to "
        f"{spread.high:,.0f} samples/s), so any single figure here carries that spread, "
        "the profile's predictions (timed in its first seconds) included; the per-round "
        "ratios compare runs made side by side."
    )


def compile_sentence(confirmation: Confirmation) -> str:
    """What torch.compile costs the recommendation, stated apart; empty when it does not
    compile."""
    winner = confirmation.winner
    compile_s = winner.median_of("compile_s")
    if not compile_s:
        return ""
    run = f"a run of {winner.run_samples:,} samples" if winner.run_samples else "the run"
    return (
        f" It compiles with torch.compile ({winner.config.compile}) for {compile_s:.1f} s "
        f"first, charged against {run}: {winner.median_run_samples_per_s:,.1f} samples/s "
        f"over the run, {winner.median_samples_per_s:,.1f} samples/s once compiled."
    )


def build_document(
    *,
    workload_name: str,
    device: DeviceInfo,
    confirmation: Confirmation,
    search_runs: Sequence[TrialRecord],
    trial_counts: dict[str, int],
    memory_limited: bool,
    memory_budget_bytes: int | None,
    fingerprint: dict[str, Any] | None,
    space: dict[str, Any],
    job_id: int,
    run: dict[str, Any] | None = None,
    profile: Profile | None = None,
    optimizer: str = "",
    effective_batch_forced: bool = False,
    distributed: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The recommendation document (schema ``autotune.recommendation/v1``), as
    :class:`RecommendationDocument` checks and writes it.

    ``run`` is the run length the candidates were ranked for (``samples``, ``epochs`` or
    ``steps``); ``speedup`` is over that run, compile time included. ``optimizer`` (the
    workload's optimizer class) picks the learning-rate advice when the recommendation changes
    the effective batch; ``effective_batch_forced``: the search held it (``--effective-batch``).
    ``distributed`` (``nproc_per_node``, ``backend``, ``host_share``): the ranks each trial ran
    as and the ranks sharing the host; the launch and the global batch follow from them.
    """
    winner, baseline = confirmation.winner, confirmation.baseline
    diagnosis = diagnose(
        _view(baseline),
        _view(winner),
        [TrialView.of(run) for run in search_runs],
        device,
        memory_limited,
        profile,
    )
    same_batch, batch_change = batch_answers(
        confirmation, optimizer, effective_batch_forced, _metrics
    )
    # The drop-in answer is applied the same way as the recommendation.
    same_batch["exports"] = exports(Config.model_validate(same_batch["config"]), device, optimizer)
    launch_ranks = (
        max(distributed["nproc_per_node"], distributed["host_share"]) if distributed else 1
    )
    if launch_ranks > 1:
        # Every rank steps the per-rank batch: the launch's batch is the ranks' sum.
        same_batch["global_effective_batch"] = same_batch["effective_batch"] * launch_ranks
        same_batch["exports"]["launch"] = launch_exports(launch_ranks)
    diagnosis += batch_sentence(same_batch, batch_change, baseline.config.public_dict())
    ratios = confirmation.paired_ratios
    document = {
        "schema": SCHEMA,
        "workload": workload_name,
        "device": device.public_dict(),
        "config": winner.config.public_dict(),
        "metrics": _metrics(winner),
        "baseline": {"config": baseline.config.public_dict(), "metrics": _metrics(baseline)},
        "speedup": confirmation.speedup,
        "run": run,
        # The fastest configuration that keeps the baseline's effective batch (a drop-in
        # change), and how the recommendation changes it (null when it keeps it).
        "same_effective_batch": same_batch,
        "batch_change": batch_change,
        "speedup_spread": {"min": min(ratios), "max": max(ratios)} if ratios else None,
        # The configuration whose confirmation runs lie furthest apart: ``unsteady`` when the
        # machine's own speed moved while the job ran (null with fewer than two runs each).
        "run_spread": _run_spread_entry(confirmation),
        "within_noise": confirmation.within_noise,
        # The rounds the confirmation ran of the most it could, why it ended before them
        # (null when it ran them all), and why it ran a round it would have skipped (null
        # when it did not).
        "confirmation_rounds": {
            "run": confirmation.rounds_run,
            "planned": confirmation.rounds_planned,
            "decided_early": confirmation.decided_because,
            "added": confirmation.added_round_because,
        },
        # The extra paired rounds of a winner that did not beat the baseline every round.
        "tie_break": _tie_break_entry(confirmation),
        "verdict": (
            speedup_sentence(confirmation)
            + compile_sentence(confirmation)
            + steadiness_sentence(confirmation)
        ),
        "trials": trial_counts,
        "diagnosis": diagnosis,
        "exports": exports(winner.config, device, optimizer)
        | ({"launch": launch_exports(launch_ranks)} if launch_ranks > 1 else {}),
        "candidates": [
            {
                "config": entry.config.public_dict(),
                "metrics": _metrics(entry),
                "usable": entry.usable,
                # Null for a candidate that ran every round; else when it left the race, and why.
                "left_race": None
                if entry.finished
                else {"after_round": entry.left_after_round, "because": entry.left_because},
            }
            for entry in confirmation.candidates
        ],
        "memory_budget_bytes": memory_budget_bytes,
        "search_space": space,
        # The step alone per batch/precision, the loader alone per worker count, and the
        # memory model: the bounds the search was seeded from (null without a profile).
        "profile": profile.public_dict() if profile is not None else None,
        **({"distributed": distributed} if distributed is not None else {}),
        "fingerprint": fingerprint,
        "job_id": job_id,
        "created_at": datetime.now(UTC).isoformat(),
    }
    # Through the model, so that what is written is what the published schema describes;
    # keys left out (an export that does not apply) stay out.
    model = RecommendationDocument.model_validate(document)
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _tie_break_entry(confirmation: Confirmation) -> dict[str, Any] | None:
    """The tie-break's candidate, its paired rounds in all and those it won, and whether it
    stayed the recommendation; null when none was needed."""
    entry = confirmation.tie_break_candidate
    if entry is None:
        return None
    ratios = confirmation.ratios_of(entry)
    return {
        "config": entry.config.public_dict(),
        "added_rounds": confirmation.tie_break_rounds,
        "paired_rounds": len(ratios),
        "faster_rounds": confirmation.rounds_won(entry),
        "kept": entry is confirmation.winner,
    }
