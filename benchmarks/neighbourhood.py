"""``python -m benchmarks.neighbourhood WORKLOAD RECOMMENDATION.json``: is the pick a local
optimum of the space it was searched in?

No exhaustive grid of the default space can be measured (thousands of configurations, hours
each), so section 1b can only show that the tuner's pick beats the reduced grid's best, which is
necessary, not sufficient. This measures what a reader would check next: every configuration
one knob away from the pick, over the values the job searched (``search_space.searched`` of its
recommendation document). Each neighbour is screened once on the search's window, beside the
pick screened at the start, the middle and the end; every neighbour that screens at least
``--close`` of the pick is then re-measured against it on the confirmation's window, in
interleaved rounds (the order alternated). A neighbour that beats the pick in every round is one
the tuner missed.

Runs go through autotune's trial runner, forked from a warm server, with ``autotune run``'s
default plans and the document's memory budget. Compiled neighbours are listed, not measured:
the tuner judges them over the user's run with their compile time charged, which one
steady-state window does not show. Markdown on stdout (and ``--output``). Run it under
``flock /tmp/autotune-bench.lock`` so that no other benchmark overlaps.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.measure import MeasurePlan, resolve_device
from autotune.runner import TrialLauncher, run_trial
from autotune.space import Config
from autotune.tuner import TuneOptions
from benchmarks._harness import Run, describe, log

#: ``autotune run``'s default options: the search's short window screens, the confirmation's
#: longer one decides.
_DEFAULTS = TuneOptions(workload="builtin:image-cnn")


@dataclass(frozen=True)
class Plans:
    """The screening window and the deciding one."""

    screen: MeasurePlan
    decide: MeasurePlan

    @classmethod
    def of(cls, options: TuneOptions) -> Plans:
        return cls(options.measure_plan(), options.confirm_plan())


@dataclass(frozen=True)
class Neighbour:
    """The pick with one knob set to another value the job searched."""

    knob: str
    value: Any
    config: Config


def neighbours(
    pick: Config, searched: Mapping[str, Iterable[Any]]
) -> tuple[list[Neighbour], list[Neighbour]]:
    """Every configuration one searched knob away from ``pick``, and apart those that compile.

    A value that cannot take effect on the pick (a prefetch factor without workers) gives the
    pick itself and is left out; so is one that repeats an earlier neighbour.
    """
    seen = {pick.key()}
    measured: list[Neighbour] = []
    compiled: list[Neighbour] = []
    for knob, values in searched.items():
        for value in values:
            config = Config.model_validate({**pick.model_dump(), knob: value}).normalized()
            if config.key() in seen:
                continue
            seen.add(config.key())
            (compiled if config.compile != "off" else measured).append(
                Neighbour(knob, value, config)
            )
    return measured, compiled


@dataclass
class Measurer:
    """Fresh-process runs of one workload with the job's memory budget."""

    workload: str
    device: str
    memory_budget_bytes: int | None
    timeout_s: float = _DEFAULTS.trial_timeout_s
    runs: int = field(default=0)

    def __call__(self, config: Config, plan: MeasurePlan) -> Run:
        result = run_trial(
            self.workload,
            config,
            self.device,
            plan,
            self.timeout_s,
            memory_budget_bytes=self.memory_budget_bytes,
            budget_is_host_memory=not self.device.startswith("cuda"),
        )
        self.runs += 1
        return Run.of(result)


@dataclass(frozen=True)
class Contest:
    """A close neighbour re-measured against the pick, one pair per round."""

    neighbour: Neighbour
    pick_runs: list[Run]
    neighbour_runs: list[Run]

    def ratios(self) -> list[float]:
        """neighbour / pick per round, over the rounds where both ran."""
        return [
            n.samples_per_s / p.samples_per_s
            for p, n in zip(self.pick_runs, self.neighbour_runs, strict=True)
            if n.ok and p.ok and n.samples_per_s and p.samples_per_s
        ]

    def beats_pick(self) -> bool:
        """Faster than the pick in every round: a difference, not the machine's noise."""
        ratios = self.ratios()
        return bool(ratios) and len(ratios) == len(self.pick_runs) and min(ratios) > 1.0


def screen(
    measure: Measurer, plan: MeasurePlan, pick: Config, candidates: list[Neighbour]
) -> tuple[list[Run], list[Run]]:
    """The pick at the start, the middle and the end; each neighbour once between."""
    middle = len(candidates) // 2
    pick_runs = [measure(pick, plan)]
    runs = []
    for index, neighbour in enumerate(candidates):
        if index == middle:
            pick_runs.append(measure(pick, plan))
        runs.append(measure(neighbour.config, plan))
        log(f"screened {neighbour.knob}={neighbour.value}: {_speed(runs[-1])}")
    pick_runs.append(measure(pick, plan))
    return pick_runs, runs


def contest(
    measure: Measurer, plan: MeasurePlan, pick: Config, neighbour: Neighbour, rounds: int
) -> Contest:
    """``rounds`` pairs on the deciding window, the order alternated."""
    pick_runs: list[Run] = []
    neighbour_runs: list[Run] = []
    for index in range(rounds):
        order = [(pick, pick_runs), (neighbour.config, neighbour_runs)]
        for config, runs in order if index % 2 == 0 else order[::-1]:
            runs.append(measure(config, plan))
    return Contest(neighbour, pick_runs, neighbour_runs)


def _speed(run: Run) -> str:
    if run.ok and run.samples_per_s is not None:
        return f"{run.samples_per_s:,.1f}"
    return run.outcome


def _median_speed(runs: list[Run]) -> float | None:
    values = [run.samples_per_s for run in runs if run.ok and run.samples_per_s is not None]
    return statistics.median(values) if values else None


def report(
    workload: str,
    pick: Config,
    pick_runs: list[Run],
    candidates: list[Neighbour],
    runs: list[Run],
    compiled: list[Neighbour],
    contests: list[Contest],
    close: float,
    trial_runs: int,
    plans: Plans,
) -> str:
    """The Markdown report: every neighbour's screen, the contests, and the verdict."""
    pick_speed = _median_speed(pick_runs)
    lines = [
        f"**{workload}**: pick {describe(pick)}; screened at "
        f"{', '.join(_speed(run) for run in pick_runs)} samples/s (median "
        f"{pick_speed or 0:,.1f}); {len(candidates)} neighbours one knob away, "
        f"{trial_runs} trial runs in all.",
        "",
        "| knob | value | samples/s (screen) | / pick |",
        "|---|---|---|---|",
    ]
    for neighbour, run in zip(candidates, runs, strict=True):
        share = (
            f"{run.samples_per_s / pick_speed:.2f}"
            if run.ok and run.samples_per_s and pick_speed
            else ""
        )
        lines.append(f"| {neighbour.knob} | {neighbour.value} | {_speed(run)} | {share} |")
    if compiled:
        lines += [
            "",
            "Not measured (compiled: judged over the run by the tuner): "
            + "; ".join(f"{n.knob}={n.value}" for n in compiled)
            + ".",
        ]
    lines.append("")
    if contests:
        lines += [
            f"Re-measured against the pick (screened at >= {close:.2f} of it), "
            f"{len(contests[0].pick_runs)} interleaved rounds on "
            f"{plans.decide.min_seconds:g} s windows (screens: "
            f"{plans.screen.min_seconds:g} s):",
            "",
            "| neighbour | pick, median | neighbour, median | neighbour / pick per "
            "round | median | faster every round |",
            "|---|---|---|---|---|---|",
        ]
        for entry in contests:
            ratios = entry.ratios()
            lines.append(
                f"| {entry.neighbour.knob}={entry.neighbour.value} | "
                f"{_median_speed(entry.pick_runs) or 0:,.1f} | "
                f"{_median_speed(entry.neighbour_runs) or 0:,.1f} | "
                f"{', '.join(f'{r:.3f}' for r in ratios)} | "
                f"{statistics.median(ratios) if ratios else float('nan'):.3f} | "
                f"{'yes' if entry.beats_pick() else 'no'} |"
            )
        lines.append("")
    lines.append(verdict(contests, close))
    return "\n".join(lines) + "\n"


def verdict(contests: list[Contest], close: float) -> str:
    """One sentence: whether a one-knob change beat the pick in every round."""
    winners = [entry for entry in contests if entry.beats_pick()]
    if winners:
        best = max(winners, key=lambda entry: statistics.median(entry.ratios()))
        return (
            f"Verdict: not a local optimum; {best.neighbour.knob}="
            f"{best.neighbour.value} beat the pick in every round (median "
            f"{statistics.median(best.ratios()):.3f}x)."
        )
    if not contests:
        return (
            f"Verdict: a local optimum; no neighbour screened at {close:.2f} of the pick or more."
        )
    return (
        "Verdict: a local optimum within the noise; no close neighbour beat the pick in "
        "every round."
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", help="as `autotune run` takes it, e.g. builtin:image-cnn")
    parser.add_argument(
        "recommendation", type=Path, help="the job's recommendation JSON (`autotune run --out`)"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--rounds", type=int, default=4, help="paired rounds for each close neighbour (default 4)"
    )
    parser.add_argument(
        "--close",
        type=float,
        default=0.95,
        help="re-measure neighbours that screen at least this share of the pick (default 0.95)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="the screening window in seconds (default: autotune run's "
        f"{_DEFAULTS.min_seconds:g}); the contests' is "
        "autotune run's confirmation window for it",
    )
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.rounds < 1 or not 0 < args.close <= 1:
        parser.error(
            "--rounds must be at least 1 and --close in (0, 1]; e.g. --rounds 4 --close 0.95"
        )
    try:
        options = (
            _DEFAULTS
            if args.seconds is None
            else TuneOptions.model_validate({**_DEFAULTS.model_dump(), "min_seconds": args.seconds})
        )
    except ValueError:
        parser.error(f"--seconds {args.seconds:g} is not a window; give seconds >= 0, e.g. 1")
    plans = Plans.of(options)
    try:
        document = json.loads(args.recommendation.read_text())
        pick = Config.model_validate(document["config"])
        searched = document["search_space"]["searched"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(
            f"{args.recommendation} is not a recommendation document with "
            f"`config` and `search_space.searched` ({exc}); write one with "
            "`autotune run --out`"
        ) from None
    device = str(resolve_device(args.device))
    candidates, compiled = neighbours(pick, searched)
    measure = Measurer(args.workload, device, document.get("memory_budget_bytes"))
    with TrialLauncher(args.workload, device):
        pick_runs, runs = screen(measure, plans.screen, pick, candidates)
        pick_speed = _median_speed(pick_runs)
        if pick_speed is None:
            raise SystemExit(f"the pick did not run: {pick_runs[-1].error}")
        close = [
            n
            for n, run in zip(candidates, runs, strict=True)
            if run.ok and run.samples_per_s and run.samples_per_s >= args.close * pick_speed
        ]
        contests = []
        for neighbour in close:
            contests.append(contest(measure, plans.decide, pick, neighbour, args.rounds))
            log(f"contest {neighbour.knob}={neighbour.value}: {contests[-1].ratios()}")
    text = report(
        args.workload,
        pick,
        pick_runs,
        candidates,
        runs,
        compiled,
        contests,
        args.close,
        measure.runs,
        plans,
    )
    if args.output is not None:
        args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
