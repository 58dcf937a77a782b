"""The report: a header (machine, device, versions, date, settings) and a table per section."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import torch

from autotune.measure import fingerprint
from autotune.tuner import CONFIRM_WINDOW_FACTOR
from benchmarks._settings import FIXED_KNOBS, SuiteSettings

_PACKAGES = ("autotune", "torch", "optuna", "sqlalchemy", "lightning", "accelerate")


@dataclass
class Section:
    """One numbered section: what it measures, a table, and what the table says in words."""

    title: str
    intro: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"## {self.title}", "", self.intro, ""]
        lines.append("| " + " | ".join(self.columns) + " |")
        lines.append("|" + "|".join("---" for _ in self.columns) + "|")
        lines.extend("| " + " | ".join(row) + " |" for row in self.rows)
        if self.findings:
            lines.append("")
            lines.extend(f"- {finding}" for finding in self.findings)
        return "\n".join(lines) + "\n"


def number(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def ratio(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}x" if value >= 0.1 else f"{value:.3f}x"


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def device_line(device: str, machine: dict[str, Any]) -> str:
    """The report's ``- Device:`` line: the GPU by name and memory, or the CPU-only note."""
    if machine["device_type"] == "cuda":
        capability = ".".join(map(str, machine["compute_capability"] or ())) or "unknown"
        return (
            f"- Device: {machine['device_name']} ({device}), "
            f"{machine['device_memory_bytes'] / 2**30:.1f} GiB, compute capability "
            f"{capability}, CUDA {machine['cuda']}, cuDNN {machine['cudnn']}; CUDA-only "
            "knobs are held at PyTorch's defaults in the reduced space, set by the seeds' "
            "checklist and searched in section 1b."
        )
    why = (
        "--device cpu on a machine with a GPU"
        if torch.cuda.is_available()
        else "no GPU was available to this run"
    )
    return f"- Device: CPU only ({why}; CUDA-only knobs are not searched)."


#: The reduced space's knobs as the header names them.
_RANGE_NAMES = {"batch_size": "batch", "num_workers": "workers"}


def header(settings: SuiteSettings, wall_s: float, load: tuple[float, float]) -> str:
    plan = settings.plan
    machine = fingerprint(torch.device(settings.device))
    memory = machine["host_memory_bytes"] / 2**30
    versions = ", ".join(f"{p} {_version(p)}" for p in _PACKAGES)
    grids = "; ".join(
        f"{g.name}: "
        + " x ".join(f"{_RANGE_NAMES.get(k, k)} {v}" for k, v in g.ranges().items())
        + f" = {g.grid_size} configurations, tuner budget {g.tuner_trials} trials"
        for g in settings.grids
    )
    fixed = ", ".join(f"{k}={v}" for k, v in FIXED_KNOBS.items())
    searched_too = sorted({k for g in settings.grids for k in g.ranges()} & set(FIXED_KNOBS))
    lines = [
        f"# autotune benchmark results ({settings.label} run)",
        "",
        f"- Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; whole suite took {wall_s / 60:.1f} min.",
        f"- Machine: {machine['cpu_model']}, {machine['cpu_count']} cores, {memory:.0f} GiB RAM, "
        f"{machine['platform']}, Python {machine['python']}.",
        device_line(settings.device, machine),
        f"- Versions: {versions}.",
        f"- Load average (1 min) at start / end: {load[0]:.2f} / {load[1]:.2f}. The machine was "
        "shared: other processes can add noise, which is why every comparison is interleaved.",
        f"- Measurement plan (every search trial, every method): warm-up {plan.warmup_steps} steps "
        f"(at least workers+1), then a window of at least {plan.min_steps} steps and "
        f"{plan.min_seconds:g} s; memory budget {settings.max_memory}"
        f"{' of GPU memory' if settings.on_cuda else ''}; each run a fresh process.",
        f"- Reduced space: {grids}; held at PyTorch's defaults: {fixed}"
        + (
            f" (except where a grid above searches {', '.join(searched_too)})"
            if searched_too
            else ""
        )
        + ".",
        f"- Tuner: confirmation of the top {settings.confirm_top} candidates and the baseline "
        f"over {settings.confirm_rounds} rounds, each run with a window "
        f"{CONFIRM_WINDOW_FACTOR}x as long in time (at least {plan.min_steps} steps and "
        f"{CONFIRM_WINDOW_FACTOR * plan.min_seconds:g} s); pruning on; "
        + (
            f"seed {settings.seed}."
            if settings.tuner_runs == 1
            else f"{settings.tuner_runs} jobs per workload in section 1, seeds {settings.seed} to "
            f"{settings.seed + settings.tuner_runs - 1}, judged on the one whose pick is the "
            f"median; seed {settings.seed} elsewhere."
        ),
        f"- Comparisons: each configuration re-measured {settings.rounds} times, interleaved "
        "(order rotated each round); figures are medians; ratios come from the same session.",
    ]
    lines.extend(f"- {note}" for note in settings.notes)
    return "\n".join(lines) + "\n"


def render(head: str, sections: list[Section]) -> str:
    return "\n".join([head, *(section.markdown() for section in sections)])
