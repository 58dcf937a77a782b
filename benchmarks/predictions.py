"""How well a job's profile predicted its trials: measured / predicted, from the job's database.

Issue 8's target is for the confirmed finalists: each candidate the confirmation re-measured
(the baseline is the reference, not a finalist), its median over its confirmation runs against
its prediction, within 0.85-1.15. The job's prediction of a trial is the profile's times the
scale stored beside it (the median measured / predicted of the job's runs of other
configurations before it; none before the first, see ``Predictor.scale``); the profile's
prediction alone is shown beside it. The search trials are shown too: they are where the
prediction steered the search, and a job cut short before its confirmation has only those.

    python -m benchmarks.predictions sqlite:///job.db            # the database's latest job
    python -m benchmarks.predictions sqlite:///job.db --job 3

It reads any job's database (``autotune run --db``, a service's), finished or not, so a GPU
session can print what its jobs measured however far each got (``benchmarks/gpu_session.sh``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, make_url, select
from sqlalchemy.exc import SQLAlchemyError

from autotune.space import Config
from autotune.store import Database, Job, Trial, resolve_url
from benchmarks._harness import describe

#: Issue 8's band for measured / predicted.
TARGET_BAND = (0.85, 1.15)


@dataclass(frozen=True)
class TrialTiming:
    """How one of a job's trial processes spent its time, and what it measured."""

    phase: str
    duration_s: float
    window_s: float | None
    #: The trial's measured samples/s (ok and not pruned), and what the profile predicted.
    samples_per_s: float | None = None
    predicted_samples_per_s: float | None = None
    config_key: str = ""
    config_summary: str = ""
    #: The scale the job read the profile at for this trial, before it ran (None: one).
    prediction_scale: float | None = None

    @property
    def ratio(self) -> float | None:
        """Measured / the profile's prediction; None where either is missing."""
        if not self.samples_per_s or not self.predicted_samples_per_s:
            return None
        return self.samples_per_s / self.predicted_samples_per_s

    @property
    def job_ratio(self) -> float | None:
        """Measured / the job's prediction (the profile's times its scale)."""
        ratio = self.ratio
        return None if ratio is None else ratio / (self.prediction_scale or 1.0)


def job_timings(db: Database, job_id: int) -> list[TrialTiming]:
    """The job's trials in the order they ran."""
    with db.session() as session:
        rows = session.scalars(select(Trial).where(Trial.job_id == job_id).order_by(Trial.number))
        return [
            TrialTiming(
                r.phase,
                r.duration_s or 0.0,
                r.window_s,
                r.samples_per_s if r.outcome == "ok" and not r.pruned else None,
                r.predicted_samples_per_s,
                r.config_key,
                describe(Config.model_validate(r.config)),
                r.prediction_scale,
            )
            for r in rows
        ]


@dataclass(frozen=True)
class Finalist:
    """A confirmed candidate: its runs' measured / predicted, by the job and by the profile."""

    summary: str
    #: Per run, measured / the job's prediction, and measured / the profile's.
    job_ratios: list[float]
    profile_ratios: list[float]

    @property
    def ratio(self) -> float:
        """The median of its runs' measured / the job's prediction: what the target judges."""
        return statistics.median(self.job_ratios)

    @property
    def profile_ratio(self) -> float:
        return statistics.median(self.profile_ratios)


@dataclass(frozen=True)
class PredictionCheck:
    """A job's measured / predicted: its search trials, and per finalist its confirmation
    runs, each against the job's prediction and the profile's."""

    #: The search trials' measured / the job's prediction, and / the profile's.
    search: list[float]
    search_profile: list[float]
    finalists: list[Finalist]

    @classmethod
    def of(cls, timings: Sequence[TrialTiming]) -> PredictionCheck:
        baseline = next((t.config_key for t in timings if t.phase == "baseline"), None)
        searched = [t for t in timings if t.phase != "confirm" and t.ratio is not None]
        runs: dict[str, list[TrialTiming]] = {}
        for timing in timings:
            if (
                timing.phase == "confirm"
                and timing.config_key != baseline
                and timing.ratio is not None
            ):
                runs.setdefault(timing.config_key, []).append(timing)
        finalists = [
            Finalist(entries[0].config_summary, _job_ratios(entries), _profile_ratios(entries))
            for entries in runs.values()
        ]
        return cls(_job_ratios(searched), _profile_ratios(searched), finalists)

    @property
    def within(self) -> int:
        """Finalists whose median lies in :data:`TARGET_BAND`."""
        low, high = TARGET_BAND
        return sum(1 for finalist in self.finalists if low <= finalist.ratio <= high)

    def findings(self, name: str) -> list[str]:
        """One sentence on the search trials, one on the finalists against the target."""
        words = []
        if self.search:
            words.append(
                f"{name}: its {len(self.search)} search trials came in at measured / "
                f"the job's prediction {_spread(self.search)}; / the profile's alone "
                f"{_spread(self.search_profile)}."
            )
        if self.finalists:
            low, high = TARGET_BAND
            met = self.within == len(self.finalists)
            profile_within = sum(1 for f in self.finalists if low <= f.profile_ratio <= high)
            each = "; ".join(
                f"{f.summary} ({f.ratio:.2f}{_runs(f.job_ratios)}; profile alone "
                f"{f.profile_ratio:.2f})"
                for f in self.finalists
            )
            words.append(
                f"{name}: confirmed finalists at measured / the job's prediction (median of "
                f"each one's runs) {each}: {self.within} of {len(self.finalists)} within "
                f"{low}-{high}, {'met' if met else '**NOT met**'} ({profile_within} on the "
                "profile's prediction alone)."
            )
        return words


def _job_ratios(timings: Sequence[TrialTiming]) -> list[float]:
    return [r for t in timings if (r := t.job_ratio) is not None]


def _profile_ratios(timings: Sequence[TrialTiming]) -> list[float]:
    return [r for t in timings if (r := t.ratio) is not None]


def _runs(ratios: Sequence[float]) -> str:
    """A finalist's runs' own ratios, lowest to highest, where it ran more than once: how far
    one run of it strays from the prediction on this machine."""
    return f", runs {min(ratios):.2f}-{max(ratios):.2f}" if len(ratios) > 1 else ""


def _spread(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f} (median; {min(values):.2f}-{max(values):.2f})"


def _latest_job(db: Database) -> int | None:
    with db.session() as session:
        return session.scalar(select(func.max(Job.id)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.predictions", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("db", help="the job's database URL, e.g. sqlite:///job.db")
    parser.add_argument("--job", type=int, help="the job's id (default: the latest)")
    args = parser.parse_args(argv)
    url = make_url(resolve_url(args.db))
    if url.get_backend_name() == "sqlite" and not Path(url.database or "").is_file():
        print(
            f"{args.db}: no such SQLite file; give the database an `autotune run --db` wrote to.",
            file=sys.stderr,
        )
        return 2
    db = Database(url.render_as_string(hide_password=False))
    try:
        job_id = args.job if args.job is not None else _latest_job(db)
        timings = [] if job_id is None else job_timings(db, job_id)
    except SQLAlchemyError as exc:
        print(
            f"{args.db} could not be read as autotune's database ({type(exc).__name__}); "
            "give the database an `autotune run --db` wrote to.",
            file=sys.stderr,
        )
        return 2
    if job_id is None:
        print(
            f"{args.db} holds no job; give the database an `autotune run --db` wrote to.",
            file=sys.stderr,
        )
        return 2
    if not timings:
        print(f"job {job_id} has no trials in {args.db}; check --job.", file=sys.stderr)
        return 2
    print(f"job {job_id}: {len(timings)} trials")
    # m/p: measured / the profile's prediction; m/job: / the job's (the profile's x scale).
    print(
        f"{'#':>3} {'phase':9} {'measured':>10} {'predicted':>10} {'scale':>5} {'m/p':>5} "
        f"{'m/job':>5}  configuration"
    )
    for number, t in enumerate(timings, start=1):  # as the CLI numbers them
        print(
            f"{number:>3} {t.phase:9} {_number(t.samples_per_s):>10} "
            f"{_number(t.predicted_samples_per_s):>10} {_ratio(t.prediction_scale):>5} "
            f"{_ratio(t.ratio):>5} {_ratio(t.job_ratio):>5}  {t.config_summary}"
        )
    for line in PredictionCheck.of(timings).findings(f"job {job_id}") or [
        f"job {job_id}: no trial has both a measurement and a prediction."
    ]:
        print(line)
    return 0


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
