"""Live progress and the final summary of a job, drawn with rich."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autotune.predict import Profile
from autotune.recommend import ceiling_numbers
from autotune.runner import ProbeResult
from autotune.search import CEILING_SHARE, MIN_IMPROVEMENT
from autotune.space import Config, SearchSpace
from autotune.store import Job, Trial
from autotune.tuner import Reporter

_SHORT = {
    "batch_size": "bs",
    "num_workers": "workers",
    "prefetch_factor": "prefetch",
    "persistent_workers": "persistent",
    "pin_memory": "pin",
    "device_prefetch": "dev-prefetch",
    "channels_last": "channels_last",
    "cudnn_benchmark": "cudnn_bench",
    "tf32": "tf32",
    "amp": "amp",
    "grad_accum_steps": "accum",
    "compile": "compile",
    "retain_freed_memory": "retain-freed",
    "intra_op_threads": "threads",
}


def describe_config(config: dict[str, Any] | Config) -> str:
    """A compact one-line description: every knob that is not at PyTorch's default."""
    values = config.public_dict() if isinstance(config, Config) else config
    defaults = Config().model_dump()
    parts = [f"bs={values['batch_size']}", f"workers={values['num_workers']}"]
    for name, value in values.items():
        if name in ("batch_size", "num_workers") or value == defaults.get(name):
            continue
        label = _SHORT.get(name, name)
        parts.append(label if value is True else f"{label}={value}")
    return " ".join(parts)


def mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f} MiB"


def _outcome_text(trial: Trial) -> str:
    if trial.pruned and trial.compile_s is not None and trial.samples_per_s is None:
        return (
            f"[yellow]pruned[/] while compiling (over {trial.compile_s:,.1f} s: more than "
            "the run can repay beside the best)"
        )
    if trial.pruned and trial.pruned_during_warmup:
        return "[yellow]pruned[/] during warm-up (far slower than the best)"
    if trial.pruned:
        return "[yellow]pruned[/] (clearly slower than the best)"
    if trial.outcome == "ok" and trial.within_budget is False:
        return "[red]over budget[/]"
    if trial.outcome == "ok":
        return "[green]ok[/]"
    reason = f": {trial.error}" if trial.error else ""
    return f"[red]{trial.outcome}[/]{reason}"


class RichReporter(Reporter):
    """A progress bar, and one line per finished trial above it."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.task: Any = None

    def profiled(self, profile: Profile) -> None:
        numbers = ceiling_numbers(profile)
        if numbers is None:
            return
        extra = (
            f"; searching {', '.join(map(str, profile.extra_workers))} workers too"
            if profile.extra_workers
            else ""
        )
        self.console.print(f"profile ({profile.duration_s:.0f} s): {numbers}{extra}")

    def profile_failed(self, reason: str) -> None:
        self.console.print(f"no profile, plain search: {reason}", style="yellow")

    def job_started(self, job: Job, probe: ProbeResult, space: SearchSpace) -> None:
        device = probe.device
        self.console.print(
            f"[bold]job {job.id}[/]: {probe.workload.name} on {device.name} ({device.type}); "
            f"{space.size():,} configurations in the space"
        )
        for name, reason in space.not_applicable.items():
            self.console.print(f"  not searched: {name} ({reason})", style="dim")
        for name, value in space.fixed.items():
            self.console.print(f"  fixed: {name}={value}", style="dim")
        self.progress.start()

    def measurement_set_started(self, measurement_set: int, changes: list[str]) -> None:
        self.console.print(
            f"  this device differs from the one measured so far ({', '.join(changes)}): "
            f"measuring anew as set {measurement_set}; the earlier trials are kept, not ranked",
            highlight=False,
        )

    def phase_started(self, phase: str, total: int) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
        label = {"search": "searching", "confirm": "confirming", "bench": "measuring"}[phase]
        self.progress.start()
        self.task = self.progress.add_task(label, total=total)

    def trial_finished(self, trial: Trial) -> None:
        speed = f"{trial.samples_per_s:,.1f} samples/s" if trial.samples_per_s else "-"
        compiled = (
            f"  compile {trial.compile_s:,.1f} s"
            if trial.compile_s is not None and trial.samples_per_s
            else ""
        )
        self.console.print(
            f"#{trial.number:<3} {trial.phase:<9} {speed:>18}  peak {mib(trial.peak_memory_bytes)}"
            f"{compiled}  {describe_config(trial.config)}  {_outcome_text(trial)}",
            highlight=False,
        )
        if self.task is not None:
            self.progress.advance(self.task)

    def candidate_left(
        self, config: Config, after_round: int, runs_saved: int, reason: str
    ) -> None:
        self.console.print(
            f"     left      {describe_config(config)}: out of the confirmation "
            f"after round {after_round}, {reason}",
            style="dim",
            highlight=False,
        )
        self._add_to_total(-runs_saved)

    def race_decided(self, rounds: int, runs_saved: int, reason: str) -> None:
        self.console.print(
            f"     decided   after round {rounds}: {reason}; {runs_saved} re-measurements spared",
            style="dim",
            highlight=False,
        )
        self._add_to_total(-runs_saved)

    def round_added(self, round_number: int, runs_added: int, reason: str) -> None:
        self.console.print(
            f"     added     round {round_number}: {reason}", style="dim", highlight=False
        )
        self._add_to_total(runs_added)

    def tie_break_started(self, config: Config, rounds: int) -> None:
        self.console.print(
            f"     tie-break {describe_config(config)}: not faster than the "
            f"baseline in every round; {rounds} more paired rounds decide",
            style="dim",
            highlight=False,
        )
        self._add_to_total(2 * rounds)

    def _add_to_total(self, runs: int) -> None:
        """Grow (or, with fewer runs left to make, shrink) the phase's progress bar."""
        if self.task is not None:
            task = next(task for task in self.progress.tasks if task.id == self.task)
            self.progress.update(self.task, total=max(0, (task.total or 0) + runs))

    def trial_skipped(self, config: Config, reason: str) -> None:
        self.console.print(
            f"     skipped   {describe_config(config)}: not run, {reason}",
            style="dim",
            highlight=False,
        )

    def job_finished(self, job: Job) -> None:
        self.progress.stop()


def search_ending(counts: dict[str, Any]) -> str:
    """Why the search measured fewer configurations than its budget, for the trials line."""
    ended, budget = counts.get("search_ended"), counts.get("search_budget")
    if ended == "converged":
        return (
            f"; the search converged before its budget of {budget} (the last measurements "
            f"gained nothing above {MIN_IMPROVEMENT:.0%}; --patience 0 measures them all)"
        )
    if ended == "ceiling":
        return (
            f"; the search ended before its budget of {budget}: its best came within "
            f"{1 - CEILING_SHARE:.0%} of the fastest the profile predicts (as read or as its "
            f"trials scale it) and no neighbour "
            f"of it gained above {1 - CEILING_SHARE:.0%} (--patience 0 measures them all)"
        )
    if ended == "exhausted":
        return "; the search tried every configuration it could"
    if ended == "stopped":
        return f"; the search stopped before its budget of {budget} (the time budget)"
    return ""


def summary_table(document: dict[str, Any]) -> Table:
    """Baseline against the recommendation, side by side."""
    table = Table(title=f"{document['workload']} on {document['device']['name']}")
    table.add_column("")
    table.add_column("baseline", justify="right")
    table.add_column("recommended", justify="right")
    base, best = document["baseline"]["metrics"], document["metrics"]
    # A third answer when the recommendation changes the effective batch and a configuration
    # other than the baseline keeps it: the drop-in change.
    same = document.get("same_effective_batch") or {}
    keep = (
        same["metrics"]
        if document.get("batch_change")
        and not same.get("is_baseline")
        and not same.get("same_as_recommendation")
        else None
    )
    if keep is not None:
        table.add_column(f"keeps batch {same['effective_batch']}", justify="right")

    def fmt(value: Any, kind: str) -> str:
        if value is None:
            return "-"
        return {
            "speed": f"{value:,.1f}",
            "ms": f"{value:,.1f}",
            "mem": mib(value),
            "frac": f"{value:.0%}",
        }[kind]

    table.add_row(
        "config",
        describe_config(document["baseline"]["config"]),
        describe_config(document["config"]),
        *([describe_config(same["config"])] if keep is not None else []),
    )
    for label, key, kind in (
        ("samples/s (median)", "samples_per_s", "speed"),
        ("samples/s over the run", "run_samples_per_s", "speed"),
        ("torch.compile s", "compile_s", "ms"),
        ("step time ms (median)", "step_time_ms", "ms"),
        ("peak memory", "peak_memory_bytes", "mem"),
        ("peak host memory", "peak_host_memory_bytes", "mem"),
        ("waiting for data", "data_wait_fraction", "frac"),
    ):
        table.add_row(
            label,
            fmt(base.get(key), kind),
            fmt(best.get(key), kind),
            *([fmt(keep.get(key), kind)] if keep is not None else []),
        )
    return table
