"""Search mechanics on a measured landscape: samplers replayed on one exhaustive grid.

Section 1 runs the tuner once per workload, so one seed's luck decides it. This measures the
grid of one workload once (``measure``), then replays the tuner's own search loop on those
measurements for many seeds (``replay``): the same sampler, first trials, duplicate handling and
budget as a job, each configuration scored by its grid run. The replay imports whichever
``autotune`` comes first on the path, so the same file compares two versions of the search::

    python -m benchmarks.search_replay measure image-cnn grid.json
    python benchmarks/search_replay.py replay grid.json --seeds 30 --trials 10

It replays the search only: the confirmation and the noise of re-measuring are not part of it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def measure(workload: str, output: Path) -> None:
    """Measure every configuration of the full suite's reduced space of ``workload`` once."""
    from benchmarks._harness import WorkloadContext
    from benchmarks._search_quality import exhaustive_grid
    from benchmarks._settings import FULL

    grid = next(g for g in FULL.grids if g.name == workload)
    ctx = WorkloadContext.open(grid, FULL)
    options = ctx.options(grid.tuner_trials)
    outcome = exhaustive_grid(ctx)
    output.write_text(
        json.dumps(
            {
                "workload": workload,
                "tuner_trials": grid.tuner_trials,
                "device": ctx.probe.device.model_dump(),
                "workload_info": ctx.probe.workload.model_dump(),
                "fixed": options.fixed,
                "ranges": options.ranges,
                "runs": [
                    {
                        "config": config.model_dump(),
                        "value": outcome.value(config),
                        "outcome": outcome.runs[config.key()].outcome
                        if config.key() in outcome.runs
                        else "missing",
                    }
                    for config in outcome.configs
                ],
            },
            indent=1,
        )
    )


def _search_once(grid: dict[str, Any], sampler_name: str, seed: int, trials: int) -> list[str]:
    """The configurations one search measures, in order (keys), replayed on the grid."""
    import optuna

    from autotune.search import (
        InfeasibleSet,
        Observation,
        SearchState,
        enqueue_first_trials,
        make_sampler,
        run_search,
    )
    from autotune.space import Config, DeviceInfo, SearchSpace, WorkloadInfo

    space = SearchSpace(
        DeviceInfo.model_validate(grid["device"]),
        WorkloadInfo.model_validate(grid["workload_info"]),
        grid["fixed"],
        grid["ranges"],
    )
    runs = {Config.model_validate(r["config"]).key(): r for r in grid["runs"]}
    sampler = (
        optuna.samplers.RandomSampler(seed=seed)
        if sampler_name == "random"
        else make_sampler(space, trials, seed)
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    if sampler_name == "tpe_categorical":  # this version's loop, every knob a category
        study.set_user_attr("params", "categorical")
    enqueue_first_trials(study, space)
    measured: list[str] = []

    def replayed(config: Config, phase: str, trial: optuna.Trial) -> Observation:
        run = runs[config.key()]
        measured.append(config.key())
        return Observation(run["value"], out_of_memory=run["outcome"] == "oom")

    run_search(study, space, SearchState(InfeasibleSet()), replayed, trials, seed=seed)
    return measured


def replay(grid_path: Path, seeds: int, trials: int) -> None:
    """Print, per sampler, the best found / the grid's best over ``seeds`` seeds (JSON).

    ``tpe`` is this version's search; ``tpe_categorical`` (in a version with ordered knobs)
    the same loop with every knob a category; ``random`` Optuna's random sampler in the loop.
    """
    import optuna

    import autotune

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    grid = json.loads(grid_path.read_text())
    from autotune.space import Config

    values = {Config.model_validate(r["config"]).key(): r["value"] for r in grid["runs"]}
    ranked = sorted(values.values(), reverse=True)
    best = ranked[0]
    report: dict[str, Any] = {
        "autotune": str(Path(autotune.__file__).parent),
        "workload": grid["workload"],
        "grid": len(values),
        "trials": trials,
        "seeds": seeds,
    }
    import autotune.search

    samplers = ["tpe", "random"]
    if hasattr(autotune.search, "ordinal_params"):  # a version that asks ordered knobs ordinally
        samplers.insert(1, "tpe_categorical")
    for sampler_name in samplers:
        ratios, ranks = [], []
        for seed in range(seeds):
            found = max(values[key] for key in _search_once(grid, sampler_name, seed, trials))
            ratios.append(found / best)
            ranks.append(ranked.index(found) + 1)
        quartiles = statistics.quantiles(ratios, n=4)
        report[sampler_name] = {
            "median_ratio": round(statistics.median(ratios), 4),
            "q1_ratio": round(quartiles[0], 4),
            "q3_ratio": round(quartiles[2], 4),
            "min_ratio": round(min(ratios), 4),
            "mean_ratio": round(statistics.fmean(ratios), 4),
            "found_best": sum(rank == 1 for rank in ranks),
            "found_top3": sum(rank <= 3 for rank in ranks),
            "median_rank": statistics.median(ranks),
            "ratios": [round(r, 4) for r in ratios],
        }
    print(json.dumps(report))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    measuring = commands.add_parser("measure", help="measure one workload's grid once")
    measuring.add_argument("workload")
    measuring.add_argument("output", type=Path)
    replaying = commands.add_parser("replay", help="replay the search on a measured grid")
    replaying.add_argument("grid", type=Path)
    replaying.add_argument("--seeds", type=int, default=30)
    replaying.add_argument("--trials", type=int, default=10)
    args = parser.parse_args(argv)
    if args.command == "measure":
        measure(args.workload, args.output)
    else:
        replay(args.grid, args.seeds, args.trials)


if __name__ == "__main__":
    main()
