"""``python -m benchmarks [--smoke] [--device DEVICE] [--output PATH] [--workload NAME ...]
[--only-quality] [--repeats N]``."""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

from autotune.errors import ConfigError
from benchmarks._settings import FULL, SMOKE, suite_device
from benchmarks._suite import run_quality_only, run_suite

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "RESULTS.md"
#: A full run on a GPU writes here by default, so it never overwrites the CPU report.
DEFAULT_CUDA_OUTPUT = DEFAULT_OUTPUT.with_name("RESULTS-cuda.md")


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a count of runs; give a whole number of at least 1"
        )
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure autotune against an exhaustive grid and the alternatives users "
        "have, and write a Markdown report.",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny run of every section (about two minutes); its figures "
        "check the plumbing, not speed",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="where every run trains: cpu (default), cuda or cuda:N, read as "
        "`autotune run --device` reads it",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"where to write the report (default: {DEFAULT_OUTPUT} for the "
        f"full run, {DEFAULT_CUDA_OUTPUT.name} beside it on CUDA, a file "
        "in the temporary folder for --smoke); on a results page such as "
        "RESULTS.md only its latest run is replaced, and the run before is "
        "appended to the month's file in log/ beside it",
    )
    parser.add_argument(
        "--workload",
        action="append",
        default=None,
        help="only this workload of the suite (repeatable; default: all)",
    )
    parser.add_argument(
        "--only-quality",
        action="store_true",
        help="re-measure section 3 alone (runner against a plain loop) on the "
        "committed picks and replace it in the report",
    )
    parser.add_argument(
        "--repeats",
        type=_at_least_one,
        default=None,
        help="fresh-process runs of each kind in sections 3 and 5 (default: "
        f"{FULL.repeats}; more rounds tell a small gap from a noisy "
        "machine's spread)",
    )
    parser.add_argument(
        "--databases",
        type=Path,
        default=None,
        help="keep the tuner's jobs in this folder, one SQLite file per "
        "workload, to read them trial by trial afterwards (default: a "
        "temporary folder deleted at the end)",
    )
    args = parser.parse_args(argv)
    try:
        device = suite_device(args.device)
    except ConfigError as exc:
        raise SystemExit(f"python -m benchmarks: {exc}") from None
    if args.only_quality and device != "cpu":
        raise SystemExit(
            "python -m benchmarks: --only-quality re-measures the CPU picks "
            "committed in RESULTS.md; run it with --device cpu"
        )
    settings = dataclasses.replace(SMOKE if args.smoke else FULL, device=device)
    if args.repeats is not None:
        settings = dataclasses.replace(settings, repeats=args.repeats)
    output = args.output or (
        Path(tempfile.gettempdir()) / "autotune-benchmarks-smoke.md"
        if args.smoke
        else DEFAULT_OUTPUT
        if device == "cpu"
        else DEFAULT_CUDA_OUTPUT
    )
    if args.only_quality:
        print(run_quality_only(settings, output, args.workload))
        return
    print(run_suite(settings, output, args.workload, args.databases))


if __name__ == "__main__":
    main()
