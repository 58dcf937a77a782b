"""Section 2: what users do instead of tuning, each measured relative to the tuner's pick."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import optuna

from autotune.search import suggest_config
from autotune.space import Config, SearchSpace
from benchmarks._harness import (
    TIE,
    TUNER,
    Comparison,
    WorkloadContext,
    describe,
    log,
    run_module,
)
from benchmarks._report import Section, number, ratio
from benchmarks._search_quality import GridOutcome

if TYPE_CHECKING:
    from benchmarks._results import WorkloadResults
    from benchmarks._tuner import TunerOutcome

#: Asks of the random sampler before giving up on finding another distinct configuration.
_MAX_ASKS = 1000
_FINDER_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Alternative:
    """A configuration found the way a user would without the tuner; None when it cannot apply."""

    method: str
    config: Config | None
    how: str
    #: A batch-size finder that returned the largest batch it was allowed: nothing ran out.
    at_limit: bool = False


def defaults(ctx: WorkloadContext) -> Alternative:
    return Alternative(
        "PyTorch defaults", ctx.defaults(), "DataLoader defaults, the workload's own batch size"
    )


_CHECKLIST_COMMON = "batch x2, workers = cores, prefetch 2, persistent workers, "
_CHECKLIST_CPU = (
    "channels_last on 4-D inputs, AMP where the hardware runs it natively (bf16 on this CPU if "
    "it has avx512_bf16/amx_bf16); pinning and cuDNN items are CUDA-only"
)
_CHECKLIST_CUDA = (
    "pin_memory, device prefetch, channels_last on 4-D inputs, AMP where the GPU runs it "
    "natively (bf16 from compute capability 8.0, else fp16), cudnn.benchmark, TF32 (8.0 and "
    "newer)"
)


def checklist(ctx: WorkloadContext) -> Alternative:
    """The seeds' checklist applied blindly, on the tuner's full space for this device (on
    CUDA its CUDA-only items too)."""
    items = _CHECKLIST_CUDA if ctx.probe.device.is_cuda else _CHECKLIST_CPU
    return Alternative("seeds' checklist", ctx.full_space().checklist(), _CHECKLIST_COMMON + items)


def lightning(ctx: WorkloadContext) -> Alternative:
    """Lightning's batch-size finder (power mode) and its suggested ``num_workers``."""
    top = max(ctx.grid.batch_sizes)
    answer = run_module(
        "benchmarks._finders",
        {
            "finder": "lightning",
            "workload": ctx.grid.workload,
            "device": ctx.settings.device,
            "max_batch": top,
            "budget_bytes": ctx.budget_bytes,
        },
        _FINDER_TIMEOUT_S,
    )
    if answer["outcome"] != "ok":
        return Alternative("Lightning rules", None, f"not run: {answer['error']}")
    config = Config(batch_size=answer["batch_size"], num_workers=answer["num_workers"])
    return Alternative(
        "Lightning rules",
        config,
        f"Tuner.scale_batch_size(mode='power', init_val={ctx.probe.workload.batch_size}, "
        f"max_val={top}) -> {answer['batch_size']} in {answer['wall_s']:.0f} s; "
        f"suggested_max_num_workers -> {answer['num_workers']}",
        at_limit=answer["batch_size"] >= top,
    )


def accelerate(ctx: WorkloadContext) -> Alternative:
    """Accelerate's ``find_executable_batch_size``; Accelerate has no rule for workers."""
    top = max(ctx.grid.batch_sizes)
    answer = run_module(
        "benchmarks._finders",
        {
            "finder": "accelerate",
            "workload": ctx.grid.workload,
            "device": ctx.settings.device,
            "max_batch": top,
            "budget_bytes": ctx.budget_bytes,
        },
        _FINDER_TIMEOUT_S,
    )
    if answer["outcome"] != "ok":
        return Alternative("Accelerate finder", None, f"not run: {answer['error']}")
    found = int(answer["batch_size"])
    batch = max(8, found // 8 * 8)  # it shrinks by 0.9x; autotune's knob needs multiples of 8
    rounded = f", rounded down to {batch}" if batch != found else ""
    return Alternative(
        "Accelerate finder",
        Config(batch_size=batch),
        f"find_executable_batch_size(starting_batch_size={top}) -> {found}{rounded} in "
        f"{answer['wall_s']:.0f} s (tried {answer['tried']}); num_workers left at 0",
        at_limit=found >= top,
    )


def random_search(ctx: WorkloadContext, grid: GridOutcome, budget: int, label: str) -> Alternative:
    """Optuna's ``RandomSampler`` on the same space; each configuration scored by its grid run.

    The grid already measured every configuration once through the same runner, so the random
    search is replayed on those measurements instead of measuring them a second time.
    """
    space = ctx.space()
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.RandomSampler(seed=ctx.settings.seed)
    )
    seen: dict[str, Config] = {}
    for _ in range(_MAX_ASKS):
        if len(seen) >= budget:
            break
        trial = study.ask()
        config = suggest_config(space, trial)
        study.tell(trial, grid.value(config))
        seen.setdefault(config.key(), config)
    pick = max(seen.values(), key=grid.value)
    return Alternative(
        f"Optuna random, {label}",
        pick,
        f"{len(seen)} distinct configurations, RandomSampler(seed="
        f"{ctx.settings.seed}), each scored by its grid measurement",
    )


#: Seeds of the random search at the tuner's wall time.
RANDOM_SEEDS = (0, 1, 2, 3, 4)


@dataclass(frozen=True)
class RandomDraw:
    """What Optuna's random sampler found in a wall-time budget, on the grid's measurements."""

    seed: int
    pick: Config
    drawn: int
    spent_s: float


def random_within(space: SearchSpace, grid: GridOutcome, wall_s: float, seed: int) -> RandomDraw:
    """Optuna's ``RandomSampler(seed)`` draws distinct configurations of ``space``, each costing
    the duration of its grid trial process, until the next would take the time spent past
    ``wall_s`` (one is always drawn); its pick is the draw with the best grid measurement.

    A repeated draw costs nothing and is told its known value (random sampling ignores it).
    """
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed)
    )
    seen: dict[str, Config] = {}
    spent = 0.0
    for _ in range(_MAX_ASKS):
        if len(seen) == len(grid.configs):
            break
        trial = study.ask()
        config = suggest_config(space, trial)
        study.tell(trial, grid.value(config))
        if config.key() in seen:
            continue
        cost = grid.runs[config.key()].duration_s
        if seen and spent + cost > wall_s:
            break
        seen[config.key()] = config
        spent += cost
    return RandomDraw(seed, max(seen.values(), key=grid.value), len(seen), spent)


def random_at_wall_time(ctx: WorkloadContext, grid: GridOutcome, wall_s: float) -> list[RandomDraw]:
    space = ctx.space()
    return [random_within(space, grid, wall_s, seed) for seed in RANDOM_SEEDS]


def random_method(seed: int) -> str:
    """The comparison session's name for random search's pick with ``seed``."""
    return f"Optuna random at the tuner's wall time, seed {seed}"


def random_findings(result: WorkloadResults) -> list[str]:
    """The tuner's pick against random search at its wall time, seed by seed.

    Random search picks the draw whose single grid measurement is highest, so that measurement
    is biased upward by the very noise that picked it (the tuner's pick is not chosen on it):
    the verdict rests on the interleaved re-measurement of both picks, and the single grid
    measurements are quoted beside it.
    """
    return tuner_against_random(
        result.name,
        result.tuner.config,
        result.tuner_wall_s,
        result.grid,
        result.comparison,
        result.random_draws,
    )


def tuner_against_random(
    name: str,
    tuner_pick: Config,
    tuner_wall_s: float,
    grid: GridOutcome,
    comparison: Comparison,
    draws: Sequence[RandomDraw],
) -> list[str]:
    """See :func:`random_findings`."""
    if not draws:
        return []
    tuner_median = comparison.median(TUNER)
    if not tuner_median:
        return [f"{name}: the tuner's pick has no re-measurement; no random comparison."]
    picks = [comparison.median(random_method(d.seed)) for d in draws]
    ratios = [tuner_median / v if v else math.inf for v in picks]
    median = statistics.median(ratios)
    seeds = "; ".join(
        f"seed {d.seed}: {d.drawn} configs in {d.spent_s:.0f} s, {describe(d.pick)} "
        f"{number(v)}/s, {r:.2f}x"
        for d, v, r in zip(draws, picks, ratios, strict=True)
    )
    verdict = "met" if median >= 1.0 else "**NOT met: random search did better**"
    tuner_single = grid.value(tuner_pick)
    known = [tuner_single / v for d in draws if tuner_single and (v := grid.value(d.pick))]
    on_single = (
        f"On the grid's single measurements, which chose random search's picks and "
        f"so favour them, the median would read {statistics.median(known):.2f}x."
        if known
        else ""
    )
    return [
        f"{name}: against Optuna's random sampler at the tuner's wall time "
        f"({tuner_wall_s:.0f} s of grid trial processes), {len(ratios)} seeds, each pick "
        f"re-measured in the interleaved session beside the tuner's ({describe(tuner_pick)}: "
        f"{number(tuner_median)}/s): tuner / random median {median:.2f}x (target >= 1.00x: "
        f"{verdict}; clear win >= 1.05x: {'yes' if median >= 1.05 else 'no'}); {seeds}. "
        f"{on_single}".rstrip()
    ]


def plain_search(outcome: TunerOutcome) -> Alternative:
    """The tuner itself without its profile (``--no-profile``): what the profile adds."""
    return Alternative(
        "autotune --no-profile",
        outcome.config,
        f"{outcome.measured} trial processes, {outcome.wall_s:.0f} s "
        "(the same job without the profile: baseline, checklist, then TPE)",
    )


def find_alternatives(
    ctx: WorkloadContext, grid: GridOutcome, search_trials: int, measured_trials: int
) -> list[Alternative]:
    log(f"{ctx.name}: alternatives (Lightning, Accelerate, random search, checklist)")
    return [
        defaults(ctx),
        lightning(ctx),
        accelerate(ctx),
        random_search(ctx, grid, search_trials, f"same --trials ({search_trials})"),
        random_search(ctx, grid, measured_trials, f"same trial processes ({measured_trials})"),
        checklist(ctx),
    ]


def section(results: Sequence[WorkloadResults]) -> Section:
    out = Section(
        title="2. Against what users do instead",
        intro=(
            "Each alternative's configuration is re-measured in the same interleaved session as "
            "the tuner's pick; *vs autotune* is its median throughput over the tuner's "
            "(below 1.00x: the tuner's pick is faster)."
        ),
        columns=[
            "workload",
            "method",
            "configuration",
            "how it was found",
            "samples/s",
            "vs autotune",
        ],
    )
    for result in results:
        comparison = result.comparison
        median_of = (
            f", the median of section 1's {len(result.tuner_runs)} jobs (seed {result.tuner.seed})"
            if len(result.tuner_runs) > 1
            else ""
        )
        out.rows.append(
            [
                result.name,
                "**autotune**",
                describe(result.tuner.config) + median_of,
                f"{result.tuner.measured} trial processes, {result.tuner.wall_s:.0f} s",
                number(comparison.median(TUNER)),
                "1.00x",
            ]
        )
        for alternative in result.alternatives:
            if alternative.config is None:
                out.rows.append(
                    [result.name, alternative.method, "-", alternative.how, "n/a", "n/a"]
                )
                continue
            relative = comparison.relative(alternative.method, TUNER)
            out.rows.append(
                [
                    result.name,
                    alternative.method,
                    describe(alternative.config),
                    alternative.how,
                    number(comparison.median(alternative.method)),
                    ratio(relative),
                ]
            )
            if relative is not None and relative > 1.0 + TIE:
                how = (
                    "clearly (every run beat every run of the tuner's pick)"
                    if comparison.clearly_apart(alternative.method, TUNER)
                    else "within the run-to-run spread"
                )
                outside = (
                    "; this configuration lies outside the reduced space the tuner searched"
                    if result.grid.rank(alternative.config) is None
                    else ""
                )
                out.findings.append(
                    f"{result.name}: **the tuner lost to {alternative.method}** "
                    f"({describe(alternative.config)}) by {100 * (relative - 1):.0f}%, {how}"
                    f"{outside}."
                )
    for result in results:
        out.findings.extend(random_findings(result))
    at_limit = [r.name for r in results if any(a.at_limit for a in r.alternatives)]
    if at_limit:
        out.findings.append(
            "Batch-size finders: nothing ran out of memory within the limits they were "
            f"given (the grid's largest batch, and the memory budget), so on {', '.join(at_limit)} "
            "they returned the largest batch allowed. Finding the largest batch that fits, "
            "their purpose, did not come into play; what is compared is the configuration they "
            "leave the user with (that batch, Lightning's worker rule, no AMP)."
        )
    return out
