"""Ranks sharing the host: the pick tuned for one process against the pick tuned for N ranks,
each re-measured as N ranks, and an independent ``torchrun`` loop against the claim.

``python -m benchmarks.ranks --workload builtin:image-cnn --ranks 2 --rounds 3``

1. Tunes the workload twice with ``autotune run`` (same trials, seed and fixed knobs, the
   profile on unless ``--no-profile``): once as one process with the whole host, once with
   ``--nproc-per-node N`` (its profile then runs as the N ranks); each job's wall time and its
   finalists' measured / predicted samples/s are printed.
2. Re-measures both picks as N ranks with autotune's runner, and the N-rank pick with the
   independent DDP loop (``benchmarks._ddp_loop``) launched by ``torchrun --nproc-per-node
   N``, interleaved round by round so that drift falls on every arm alike.
3. Prints a Markdown table: medians, the spread (min-max) of each arm, the ratio of the
   picks, and the torchrun loop against the N-rank recommendation's claim (its confirmed
   samples/s) and against the runner's re-measurement of it.

Run it under the exclusive benchmark lock, on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autotune.measure import MeasurePlan
from autotune.runner import RankPlan, TrialLauncher, kill_group, run_trial
from autotune.space import Config
from benchmarks._harness import interleave, log

_ROOT = Path(__file__).resolve().parent.parent


def _cpu_name() -> str:
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def tune(workload: str, ranks: int, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """``autotune run`` as a user runs it; the recommendation JSON."""
    out = folder / f"pick-{ranks}.json"
    command = [
        sys.executable, "-m", "autotune", "run", workload,
        "--device", "cpu", "--nproc-per-node", str(ranks),
        "--trials", str(args.trials), "--seed", str(args.seed),
        "--min-seconds", str(args.min_seconds), "--confirm-top", "2", "--confirm-rounds", "2",
        "--fix", "compile=off",
        "--db", str(folder / f"ranks-{ranks}.db"), "--out", str(out), "--fresh", "--quiet",
        *(["--no-profile"] if args.no_profile else []),
    ]  # fmt: skip
    log(f"tuning {workload} as {ranks} rank(s)")
    started = time.perf_counter()
    subprocess.run(command, check=True, timeout=args.tune_timeout)
    document: dict[str, Any] = json.loads(out.read_text())
    document["_path"] = str(out)
    document["_wall_s"] = time.perf_counter() - started
    document["_finalists"] = finalists(folder / f"ranks-{ranks}.db")
    return document


def finalists(db: Path) -> list[float]:
    """Measured / predicted samples/s of the job's confirmation runs (global units both)."""
    with contextlib.closing(sqlite3.connect(db)) as connection:
        rows = connection.execute(
            "SELECT samples_per_s, predicted_samples_per_s FROM autotune_trials "
            "WHERE phase = 'confirm' AND outcome = 'ok' AND predicted_samples_per_s > 0"
        ).fetchall()
    return [float(measured) / float(predicted) for measured, predicted in rows]


def torchrun_loop(workload: str, path: str, ranks: int, seconds: float) -> float | None:
    """Global samples/s of the independent DDP loop under ``torchrun``; None when it failed."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])
    )
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        "--nproc-per-node", str(ranks),
        "-m", "benchmarks._ddp_loop", workload, path, str(seconds),
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=300)
    finally:
        kill_group(process.pid)
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            value = float(json.loads(line)["samples_per_s"])
            log(f"torchrun: ok {value}")
            return value
    log(f"torchrun loop failed: {stderr.strip().splitlines()[-1:]}")
    return None


def _spread(values: list[float]) -> str:
    return f"{min(values):,.0f}-{max(values):,.0f}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="builtin:image-cnn")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-seconds", type=float, default=2.0, help="search trials' window")
    parser.add_argument("--seconds", type=float, default=6.0, help="re-measurement window")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tune-timeout", type=float, default=900.0)
    parser.add_argument("--folder", type=Path, default=None)
    parser.add_argument("--no-profile", action="store_true", help="tune without the profile")
    args = parser.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="autotune-ranks-"))
    folder.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.UTC)
    one = tune(args.workload, 1, args, folder)
    many = tune(args.workload, args.ranks, args, folder)
    plan = MeasurePlan(warmup_steps=5, min_steps=20, min_seconds=args.seconds)
    picks = {
        "one": Config.model_validate(one["config"]),
        "many": Config.model_validate(many["config"]),
    }

    def runner(name: str) -> Any:
        def measure() -> float | None:
            record = run_trial(args.workload, picks[name], "cpu", plan, 300)
            log(f"{name}: {record.outcome} {record.samples_per_s}")
            return record.samples_per_s if record.outcome == "ok" else None

        return measure

    log(f"re-measuring both picks as {args.ranks} ranks, {args.rounds} rounds, interleaved")
    with TrialLauncher(args.workload, "cpu", RankPlan(args.ranks, args.ranks)):
        runs = interleave(
            {
                "one": runner("one"),
                "many": runner("many"),
                "torchrun": lambda: torchrun_loop(
                    args.workload, many["_path"], args.ranks, args.seconds
                ),
            },
            args.rounds,
        )
    ok = {name: [v for v in values if v is not None] for name, values in runs.items()}
    medians = {name: statistics.median(v) if v else None for name, v in ok.items()}
    claim = float(many["metrics"]["samples_per_s"])
    minutes = (datetime.datetime.now(datetime.UTC) - started).total_seconds() / 60

    def ratio(a: float | None, b: float | None) -> str:
        return f"{a / b:.3f}" if a and b else "-"

    print(
        f"\n{args.workload}, {_cpu_name()} ({os.cpu_count()} vCPU), {started:%Y-%m-%d}, "
        f"{args.rounds} interleaved rounds of {args.seconds:g} s windows, {minutes:.1f} min\n"
    )
    print(f"| arm (all as {args.ranks} gloo ranks) | config | samples/s median | spread | failed |")
    print("|---|---|---:|---|---:|")
    for name, label, document in (
        ("one", "pick tuned for 1 process", one),
        ("many", f"pick tuned for {args.ranks} ranks", many),
        ("torchrun", f"`torchrun` DDP loop, {args.ranks}-rank pick", many),
    ):
        config = {k: v for k, v in document["config"].items() if k in (
            "batch_size", "num_workers", "prefetch_factor", "persistent_workers", "amp",
            "channels_last", "intra_op_threads", "optimizer_impl", "in_order",
            "retain_freed_memory", "grad_accum_steps")}  # fmt: skip
        median = medians[name]
        shown = f"{median:,.0f}" if median else "-"
        print(f"| {label} | `{json.dumps(config)}` | {shown} | {_spread(ok[name])} | "
              f"{len(runs[name]) - len(ok[name])} |")  # fmt: skip
    print(
        f"\n- {args.ranks}-rank pick / 1-process pick, both as {args.ranks} ranks: "
        f"**{ratio(medians['many'], medians['one'])}**"
    )
    print(
        f"- {args.ranks}-rank recommendation's claim: {claim:,.0f} samples/s; torchrun loop / "
        f"claim: **{ratio(medians['torchrun'], claim)}**; torchrun loop / runner "
        f"re-measurement: {ratio(medians['torchrun'], medians['many'])}"
    )
    print(
        f"- 1-process recommendation's own claim (as 1 process): "
        f"{float(one['metrics']['samples_per_s']):,.0f} samples/s"
    )
    for name, document in (("1-process", one), (f"{args.ranks}-rank", many)):
        ratios = document["_finalists"]
        inside = sum(0.85 <= r <= 1.15 for r in ratios)
        shown = ", ".join(f"{r:.2f}" for r in ratios) or "none"
        print(
            f"- {name} job: {document['_wall_s']:.0f} s wall; finalists measured / predicted: "
            f"{shown} ({inside} of {len(ratios)} inside 0.85-1.15)"
        )
    print(f"- jobs and picks: {folder}")


if __name__ == "__main__":
    main()
