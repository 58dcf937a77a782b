"""How well a job's profile predicted its trials: measured / predicted, from the job's database.

Issue 8's target is for the confirmed finalists: each candidate the confirmation re-measured
(the baseline is the reference, not a finalist), its median over its confirmation runs against
its prediction, within 0.85-1.15. The search trials are shown beside them: they are where the
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

    @property
    def ratio(self) -> float | None:
        """Measured / predicted; None where either is missing."""
        if not self.samples_per_s or not self.predicted_samples_per_s:
            return None
        return self.samples_per_s / self.predicted_samples_per_s


def job_timings(db: Database, job_id: int) -> list[TrialTiming]:
    """The job's trials in the order they ran."""
    with db.session() as session:
        rows = session.scalars(select(Trial).where(Trial.job_id == job_id)
                               .order_by(Trial.number))
        return [TrialTiming(
            r.phase, r.duration_s or 0.0, r.window_s,
            r.samples_per_s if r.outcome == "ok" and not r.pruned else None,
            r.predicted_samples_per_s, r.config_key,
            describe(Config.model_validate(r.config)))
            for r in rows]


@dataclass(frozen=True)
class PredictionCheck:
    """A job's measured / predicted: its search trials, and per finalist the median of its
    confirmation runs against its prediction."""

    search: list[float]
    #: Per finalist: (its configuration, median measured / predicted, its runs' ratios).
    finalists: list[tuple[str, float, list[float]]]

    @classmethod
    def of(cls, timings: Sequence[TrialTiming]) -> PredictionCheck:
        baseline = next((t.config_key for t in timings if t.phase == "baseline"), None)
        search = [r for t in timings if t.phase != "confirm" and (r := t.ratio) is not None]
        runs: dict[str, list[TrialTiming]] = {}
        for timing in timings:
            if timing.phase == "confirm" and timing.config_key != baseline:
                runs.setdefault(timing.config_key, []).append(timing)
        finalists = []
        for entries in runs.values():
            ratios = [r for t in entries if (r := t.ratio) is not None]
            measured = [t.samples_per_s for t in entries if t.samples_per_s]
            predicted = entries[0].predicted_samples_per_s
            if measured and predicted:
                finalists.append((entries[0].config_summary,
                                  statistics.median(measured) / predicted, ratios))
        return cls(search, finalists)

    @property
    def within(self) -> int:
        """Finalists whose median lies in :data:`TARGET_BAND`."""
        low, high = TARGET_BAND
        return sum(1 for _, value, _ in self.finalists if low <= value <= high)

    def findings(self, name: str) -> list[str]:
        """One sentence on the search trials, one on the finalists against the target."""
        words = []
        if self.search:
            words.append(f"{name}: its {len(self.search)} search trials came in at measured / "
                         f"predicted {_spread(self.search)}.")
        if self.finalists:
            low, high = TARGET_BAND
            met = self.within == len(self.finalists)
            each = "; ".join(f"{summary} ({value:.2f}{_runs(ratios)})"
                             for summary, value, ratios in self.finalists)
            words.append(
                f"{name}: confirmed finalists at measured / predicted (median of each one's "
                f"runs) {each}: {self.within} of {len(self.finalists)} within {low}-{high}, "
                f"{'met' if met else '**NOT met**'}.")
        return words


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
    parser = argparse.ArgumentParser(prog="python -m benchmarks.predictions",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("db", help="the job's database URL, e.g. sqlite:///job.db")
    parser.add_argument("--job", type=int, help="the job's id (default: the latest)")
    args = parser.parse_args(argv)
    url = make_url(resolve_url(args.db))
    if url.get_backend_name() == "sqlite" and not Path(url.database or "").is_file():
        print(f"{args.db}: no such SQLite file; give the database an `autotune run --db` "
              "wrote to.", file=sys.stderr)
        return 2
    db = Database(url.render_as_string(hide_password=False))
    try:
        job_id = args.job if args.job is not None else _latest_job(db)
        timings = [] if job_id is None else job_timings(db, job_id)
    except SQLAlchemyError as exc:
        print(f"{args.db} could not be read as autotune's database ({type(exc).__name__}); "
              "give the database an `autotune run --db` wrote to.", file=sys.stderr)
        return 2
    if job_id is None:
        print(f"{args.db} holds no job; give the database an `autotune run --db` wrote to.",
              file=sys.stderr)
        return 2
    if not timings:
        print(f"job {job_id} has no trials in {args.db}; check --job.", file=sys.stderr)
        return 2
    print(f"job {job_id}: {len(timings)} trials")
    print(f"{'#':>3} {'phase':9} {'measured':>10} {'predicted':>10} {'m/p':>5}  configuration")
    for number, t in enumerate(timings, start=1):  # as the CLI numbers them
        ratio = t.ratio
        print(f"{number:>3} {t.phase:9} {_number(t.samples_per_s):>10} "
              f"{_number(t.predicted_samples_per_s):>10} "
              f"{'' if ratio is None else f'{ratio:.2f}':>5}  {t.config_summary}")
    for line in PredictionCheck.of(timings).findings(f"job {job_id}") or [
            f"job {job_id}: no trial has both a measurement and a prediction."]:
        print(line)
    return 0


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


if __name__ == "__main__":
    sys.exit(main())
