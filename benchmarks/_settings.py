"""What the suite measures and how long it measures it: the full run and the smoke run."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.measure import MeasurePlan, resolve_device
from autotune.space import Config
from autotune.tuner import TuneOptions

#: Workload files of the suite's own making, each built to mislead a rule of thumb.
WORKLOAD_FILES = Path(__file__).resolve().parent / "workloads"


@dataclass(frozen=True)
class WorkloadGrid:
    """One workload and the reduced space that the grid and the tuner both search."""

    name: str
    batch_sizes: tuple[int, ...]
    workers: tuple[int, ...]
    amp: tuple[str, ...]
    #: Search trials the tuner may measure (its confirmation runs come on top).
    tuner_trials: int
    #: A workload file in ``benchmarks/workloads/``; None for the built-in called ``name``.
    file: str | None = None
    #: ``retain_freed_memory`` values searched (CPU, glibc); one value: held at PyTorch's default.
    retain_freed_memory: tuple[bool, ...] = (False,)

    @property
    def workload(self) -> str:
        return str(WORKLOAD_FILES / self.file) if self.file else f"builtin:{self.name}"

    @property
    def grid_size(self) -> int:
        return math.prod(len(values) for values in self.ranges().values())

    def ranges(self) -> dict[str, Any]:
        """The tuner's ``--range`` values for this space."""
        ranges: dict[str, Any] = {
            "batch_size": list(self.batch_sizes),
            "num_workers": list(self.workers),
            "amp": list(self.amp),
        }
        if len(self.retain_freed_memory) > 1:
            ranges["retain_freed_memory"] = list(self.retain_freed_memory)
        return ranges

    def fixed(self) -> dict[str, Any]:
        """The tuner's ``--fixed`` values: :data:`FIXED_KNOBS` less what this grid searches."""
        searched = self.ranges()
        return {knob: value for knob, value in FIXED_KNOBS.items() if knob not in searched}


#: Knobs held at PyTorch's defaults in the reduced space, so the grid stays exhaustive.
FIXED_KNOBS: dict[str, Any] = {
    "prefetch_factor": None,
    "persistent_workers": False,
    "channels_last": False,
    # torch.compile costs 15 s and more per compiled trial on this CPU: a grid over it would
    # take most of the suite; its own tests measure it (tests/test_compile.py).
    "compile": "off",
    # CUDA-only knobs: held so that a CUDA grid has the CPU grid's shape and size (on a CPU they
    # do not apply and holding them changes nothing). The seeds' checklist turns them on and
    # section 1b's default space searches them.
    "pin_memory": False,
    "device_prefetch": False,
    "cudnn_benchmark": False,
    "tf32": None,
    # Doubles the grid; searched in the grids of the workloads whose default jobs pick it (1b).
    "retain_freed_memory": False,
    # PyTorch's default threads; section 1b's default space searches one thread on a CPU.
    "intra_op_threads": None,
}


def suite_device(requested: str) -> str:
    """``--device`` as ``autotune run --device`` reads it (cpu, cuda, cuda:N), written as
    ``cpu`` or ``cuda:N``; raises :class:`autotune.errors.ConfigError`, saying what to use
    instead, when the device is not on this machine."""
    return str(resolve_device(requested))


@dataclass(frozen=True)
class SuiteSettings:
    """Every setting of one suite run; written into the report."""

    label: str
    grids: tuple[WorkloadGrid, ...]
    plan: MeasurePlan
    #: Memory budget given to the tuner, the grid and the batch-size finders alike.
    max_memory: str
    trial_timeout_s: float
    confirm_top: int
    confirm_rounds: int
    #: Interleaved fresh-process runs per configuration when comparing methods (sections 1-2).
    rounds: int
    #: Fresh-process runs per measurement kind in sections 3 and 5.
    repeats: int
    #: Workload and extra trial budgets timed to show how tuning time grows (section 4).
    growth_workload: str
    growth_budgets: tuple[int, ...]
    seed: int = 0
    #: Section 1's tuner jobs per workload, seeds ``seed``, ``seed + 1``, ...: one job's pick
    #: rides the machine's noise, so the section judges the run whose pick is the median.
    tuner_runs: int = 1
    #: Seconds the tuner's profile may take (``--profile-seconds``).
    profile_seconds: float = 40.0
    #: Search trials of the tuner on the default space (section 1b); None: ``autotune run``'s
    #: defaults in everything (the smoke run keeps its own tiny plan and budget instead).
    default_space_trials: int | None = None
    notes: tuple[str, ...] = field(default=())
    #: Where every run trains (``--device``): ``cpu`` or ``cuda:N``, as :func:`suite_device`
    #: writes it.
    device: str = "cpu"
    #: Window of sections 3 and 5 (runner against plain loop). None: the confirmation window
    #: of ``autotune run``'s defaults, whose runs give the figures a recommendation reports.
    quality_plan: MeasurePlan | None = None

    def measurement_quality_plan(self) -> MeasurePlan:
        if self.quality_plan is not None:
            return self.quality_plan
        defaults = TuneOptions(workload="builtin:image-cnn").confirm_plan()
        return MeasurePlan(
            warmup_steps=self.plan.warmup_steps,
            min_steps=defaults.min_steps,
            min_seconds=defaults.min_seconds,
            seed=self.seed,
        )

    @property
    def on_cuda(self) -> bool:
        return self.device.startswith("cuda")


_CPU_BATCHES = (32, 64, 128, 256)
_CPU_WORKERS = (0, 1, 2, 4, 8)
_CPU_AMP = ("off", "bf16")

FULL = SuiteSettings(
    label="full",
    grids=(
        WorkloadGrid("slow-storage", _CPU_BATCHES, _CPU_WORKERS, _CPU_AMP, tuner_trials=10),
        WorkloadGrid("image-cnn", _CPU_BATCHES, _CPU_WORKERS, _CPU_AMP, tuner_trials=10),
        # Batches up to 192 and glibc's trimming searched: default jobs pick both (section 1b).
        WorkloadGrid(
            "text-transformer",
            (16, 32, 64, 128, 192),
            (0, 2),
            _CPU_AMP,
            tuner_trials=10,
            retain_freed_memory=(False, True),
        ),
        # Built to mislead (benchmarks/workloads/): the best worker count far above the cores;
        # larger batches slower per sample and bf16 slower than fp32. Trial budgets in the
        # built-ins' proportion (a quarter of the grid). glibc's trimming searched: both
        # workloads' default jobs pick it (RESULTS-misleading.md 1b).
        WorkloadGrid(
            "many-workers",
            _CPU_BATCHES,
            (0, 2, 8, 24, 48),
            ("off",),
            tuner_trials=10,
            file="many_workers.py",
            retain_freed_memory=(False, True),
        ),
        WorkloadGrid(
            "big-batch",
            (32, 64, 128, 256, 512, 1024),
            (0, 2),
            _CPU_AMP,
            tuner_trials=12,
            file="big_batch.py",
            retain_freed_memory=(False, True),
        ),
    ),
    plan=MeasurePlan(warmup_steps=2, min_steps=3, min_seconds=1.0),
    max_memory="4GiB",
    trial_timeout_s=120.0,
    confirm_top=2,
    confirm_rounds=2,
    rounds=5,
    repeats=4,
    growth_workload="slow-storage",
    growth_budgets=(4, 7),
    tuner_runs=3,
)

_SMOKE_PLAN = MeasurePlan(warmup_steps=1, min_steps=2, min_seconds=0.2)

SMOKE = SuiteSettings(
    label="smoke",
    grids=(
        WorkloadGrid(
            "slow-storage", batch_sizes=(32, 64), workers=(0, 2), amp=("off",), tuner_trials=2
        ),
    ),
    plan=_SMOKE_PLAN,
    max_memory="4GiB",
    trial_timeout_s=60.0,
    confirm_top=1,
    confirm_rounds=1,
    rounds=1,
    repeats=2,
    growth_workload="slow-storage",
    growth_budgets=(1,),
    tuner_runs=2,
    profile_seconds=2.0,
    default_space_trials=2,
    notes=("Smoke run: tiny windows and one round; its figures check the plumbing, not speed.",),
    quality_plan=_SMOKE_PLAN,
)


#: The tuner's picks in the committed full run (RESULTS.md, section 1's table): what
#: ``--only-quality`` re-measures when section 3 is refreshed on its own. A full run that
#: picks otherwise updates them (tests/test_benchmarks_committed_picks.py holds the two equal).
COMMITTED_PICKS: dict[str, Config] = {
    "slow-storage": Config(batch_size=32, num_workers=8),
    "image-cnn": Config(batch_size=256, num_workers=0, amp="bf16"),
    "text-transformer": Config(batch_size=192, num_workers=0, retain_freed_memory=True),
}

#: The configurations the knob benchmarks train (``benchmarks.retain_freed_memory``,
#: ``benchmarks.sampler_cost``): the full run's picks of 2026-11-26, held fixed so that their
#: figures in RESULTS.md stay comparable from run to run whatever a later search picks. They
#: time what the main process's own allocations cost, so text-transformer's trains without
#: workers (with two, its batches' page faults fall in the workers: 1,418 a step against 5,080).
KNOB_BENCHMARK_CONFIGS: dict[str, Config] = {
    "slow-storage": Config(batch_size=128, num_workers=8),
    "image-cnn": Config(batch_size=64, num_workers=2),
    "text-transformer": Config(batch_size=32),
}
