"""The ``autotune`` command line: a thin face over :mod:`autotune.tuner`."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from sqlalchemy import select

from autotune import __version__
from autotune.cli._report import register as register_report_command
from autotune.cli._report import report_hint
from autotune.cli._schema import register as register_schema_command
from autotune.cli._service import register as register_service_commands
from autotune.cli._token import register as register_token_command
from autotune.errors import ConfigError, first_validation_error
from autotune.measure import MeasurePlan
from autotune.space import check_knob_settings, parse_assignments
from autotune.store import Database, Job, TrialRecord, open_database, utcnow
from autotune.tuner import (
    Reporter,
    TuneOptions,
    bench,
    create_job,
    read_config,
    remembered_answer,
    run_job,
)
from autotune.tuner._options import DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_PATIENCE
from autotune.workload import builtin_names, parse_ref

app = typer.Typer(
    help="Measure and search the settings that decide PyTorch training speed.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
# A command's output (what a script reads) goes to stdout; the progress and summary of `run` and
# `bench` go to stderr, so that stdout stays clean for a pipe (`autotune run ... --json | jq`).
console = Console(stderr=False, highlight=False)


def _progress_console(quiet: bool = False) -> Console:
    """Where progress and summaries are shown: stderr; nowhere with ``quiet``."""
    return Console(stderr=True, highlight=False, quiet=quiet)


def _print_version(value: bool) -> None:
    if value:
        print(f"autotune {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Measure and search the settings that decide PyTorch training speed."""


_PLAN = MeasurePlan()  # the measurement window's defaults, shared with TuneOptions

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db", help="Database URL or SQLite file (default: $AUTOTUNE_DB or ./autotune.db)."
    ),
]
DeviceOption = Annotated[str, typer.Option(help="auto, cpu or cuda[:N].")]
DebugOption = Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")]
MaxMemoryOption = Annotated[
    str | None, typer.Option(help="Memory budget: bytes, 8GB, 512MiB or 80% of the device.")
]
TimeoutOption = Annotated[float, typer.Option(help="Seconds one trial may take.")]
MinSecondsOption = Annotated[float, typer.Option(help="Shortest timed window (s).")]
MinStepsOption = Annotated[int, typer.Option(help="Fewest timed steps.")]
WarmupStepsOption = Annotated[int, typer.Option(help="Fewest untimed warm-up steps.")]
EpochsOption = Annotated[
    int | None,
    typer.Option(
        help="Your run's length in epochs (default 1); torch.compile's time is charged against it."
    ),
]
StepsOption = Annotated[
    int | None,
    typer.Option(
        help="Your run's length in optimizer steps at the baseline's batch, instead of --epochs."
    ),
]
CompileTimeoutOption = Annotated[
    float, typer.Option(help="Seconds a trial that compiles may take beyond --timeout.")
]


def _run_length(epochs: int | None, steps: int | None) -> None:
    if epochs is not None and steps is not None:
        raise ConfigError(
            f"--epochs {epochs} and --steps {steps} both give the run's length; pass one of them"
        )


def _options(**values: Any) -> TuneOptions:
    """Build TuneOptions, turning a validation error into one sentence naming the option."""
    try:
        return TuneOptions(**values)
    except ValidationError as exc:
        where, message = first_validation_error(exc)
        field = where.split(".")[0].replace("_", "-") or "options"
        raise ConfigError(f"--{field}: {message}") from None


def _find_resumable(db: Database, workload: str, job_id: int | None) -> int:
    with db.session() as session:
        if job_id is not None:
            job = session.get(Job, job_id)
            if job is None:
                raise ConfigError(f"--job {job_id} does not exist in {db.shown_url}")
            if job.status == "succeeded":
                raise ConfigError(
                    f"job {job_id} already succeeded; start a new run without --resume"
                )
            return job.id
        query = (
            select(Job)
            .where(Job.workload == workload, Job.status != "succeeded", Job.status != "cancelled")
            .order_by(Job.id.desc())
            .limit(1)
        )
        job = session.scalars(query).first()
        if job is None:
            raise ConfigError(
                f"nothing to resume for {workload} in {db.shown_url}; run without "
                "--resume to start a job"
            )
        return job.id


def _set_option(db: Database, job_id: int, name: str, value: Any) -> None:
    """Change one stored option of a job about to be resumed."""
    with db.session(immediate=True) as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.options = {**job.options, name: value}


def _json_text(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2) + "\n"


def _write_json(path: Path, document: dict[str, Any]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(_json_text(document))
    os.replace(temporary, path)


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@app.command()
def run(
    workload: Annotated[
        str,
        typer.Argument(help="path/to/file.py[:FUNCTION], package.module:FUNCTION or builtin:NAME."),
    ],
    trials: Annotated[int, typer.Option(help="Most configurations to measure in the search.")] = 20,
    patience: Annotated[
        int,
        typer.Option(
            help="End the search sooner once this many measurements in a row gain nothing above "
            "2% (after the baseline, checklist and predicted seeds); 0: measure all --trials."
        ),
    ] = DEFAULT_PATIENCE,
    out: Annotated[Path, typer.Option(help="Where to write the recommendation JSON.")] = Path(
        "autotune-best.json"
    ),
    db: DbOption = None,
    fix: Annotated[
        list[str] | None, typer.Option(help="Fix a knob: --fix amp=bf16 (repeatable).")
    ] = None,
    range_: Annotated[
        list[str] | None,
        typer.Option(
            "--range", help="Narrow a knob: --range batch_size=16..256, --range amp=off,bf16."
        ),
    ] = None,
    baseline: Annotated[
        list[str] | None,
        typer.Option(
            help="Your current setting of a knob, for the baseline: --baseline num_workers=4."
        ),
    ] = None,
    effective_batch: Annotated[
        int | None,
        typer.Option(help="Hold batch_size x gradient-accumulation steps at this value."),
    ] = None,
    max_memory: MaxMemoryOption = None,
    timeout: TimeoutOption = 180.0,
    time_budget: Annotated[
        float | None,
        typer.Option(
            help="Seconds the whole job may take, profile and confirmation included: the search "
            "stops in time to confirm its best beside the baseline."
        ),
    ] = None,
    device: DeviceOption = "auto",
    seed: Annotated[int, typer.Option(help="Seed of the sampler and of each trial.")] = 0,
    min_seconds: MinSecondsOption = _PLAN.min_seconds,
    min_steps: MinStepsOption = _PLAN.min_steps,
    warmup_steps: WarmupStepsOption = _PLAN.warmup_steps,
    confirm_top: Annotated[int, typer.Option(help="Best candidates to re-measure.")] = 3,
    confirm_rounds: Annotated[
        int,
        typer.Option(
            help="Re-measurements of each, at most (the race ends once its answers are decided)."
        ),
    ] = 3,
    confirm_seconds: Annotated[
        float | None,
        typer.Option(
            help="Shortest timed window of a re-measurement (default: 2 x --min-seconds)."
        ),
    ] = None,
    prune: Annotated[bool, typer.Option(help="Stop clearly slow trials early.")] = True,
    epochs: EpochsOption = None,
    steps: StepsOption = None,
    compile_timeout: CompileTimeoutOption = DEFAULT_COMPILE_TIMEOUT_S,
    profile: Annotated[
        bool,
        typer.Option(
            help="Profile the step and the loader alone first and seed the search with the "
            "predicted best configurations (--no-profile: the plain search)."
        ),
    ] = True,
    profile_seconds: Annotated[
        float,
        typer.Option(help="Seconds the profile may spend measuring (half step, half loader)."),
    ] = 40.0,
    nproc_per_node: Annotated[
        int,
        typer.Option(
            help="Measure every trial as this many DDP ranks on this host, as torchrun "
            "--nproc-per-node N runs them (one GPU each on CUDA, gloo on a CPU); batch size "
            "and workers are per rank, throughput is all ranks'."
        ),
    ] = 1,
    host_share: Annotated[
        int | None,
        typer.Option(
            help="Ranks your launch runs on this host (default: --nproc-per-node): each rank "
            "is tuned with its share of the cores and memory, e.g. --host-share 8 on one GPU "
            "of an 8-GPU machine."
        ),
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="Continue the last unfinished job of this workload.")
    ] = False,
    job: Annotated[int | None, typer.Option(help="With --resume: the job to continue.")] = None,
    on_new_hardware: Annotated[
        str | None,
        typer.Option(
            help="When a job resumes on other hardware or software: fresh (measure anew, keep the "
            "old trials apart) or refuse (fail). Default: the job's own, fresh for a new job."
        ),
    ] = None,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the recommendation JSON (as written to --out) on stdout, and nothing else "
            "there.",
        ),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet", help="Show no progress and no summary on stderr; errors are still shown."
        ),
    ] = False,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh",
            help="Measure again even where a finished job already answered this workload (same "
            "source, options, device and software); without it, that job's answer is returned.",
        ),
    ] = False,
    debug: DebugOption = False,
) -> None:
    """Search the knobs for WORKLOAD and write the recommended configuration.

    A finished job that answered the same question (the workload's source and the modules it
    imports from its folder, the options that shape the answer, the device class and software)
    answers at once, unless ``--fresh``.
    """
    parse_ref(workload)
    fixed = parse_assignments(fix or [], "--fix")
    ranges = parse_assignments(range_ or [], "--range")
    baseline_values = parse_assignments(baseline or [], "--baseline")
    check_knob_settings(fixed, ranges, baseline_values)
    _run_length(epochs, steps)
    options = _options(
        workload=workload,
        n_trials=trials,
        time_budget_s=time_budget,
        trial_timeout_s=timeout,
        max_memory=max_memory,
        fixed=fixed,
        ranges=ranges,
        baseline=baseline_values,
        effective_batch=effective_batch,
        device=device,
        seed=seed,
        warmup_steps=warmup_steps,
        min_steps=min_steps,
        min_seconds=min_seconds,
        confirm_top=confirm_top,
        confirm_rounds=confirm_rounds,
        confirm_seconds=confirm_seconds,
        prune=prune,
        patience=patience,
        epochs=epochs,
        steps=steps,
        compile_timeout_s=compile_timeout,
        on_new_hardware=on_new_hardware or "fresh",
        profile=profile,
        profile_seconds=profile_seconds,
        nproc_per_node=nproc_per_node,
        host_share=host_share,
    )
    shown = _progress_console(quiet)
    database = open_database(db)
    if resume:
        job_id = _find_resumable(database, workload, job)
        if on_new_hardware is not None:
            _set_option(database, job_id, "on_new_hardware", options.on_new_hardware)
        shown.print(f"resuming job {job_id}")
    else:
        earlier = None if fresh else remembered_answer(database, options)
        if earlier is not None and earlier.recommendation is not None:
            _say_remembered(earlier)
            _present_answer(earlier.recommendation, earlier.id, out, db, json_output, shown)
            return
        job_id = create_job(database, options, status="running")
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    from autotune.cli._progress import RichReporter

    try:
        finished = run_job(database, job_id, Reporter() if quiet else RichReporter(shown))
    except KeyboardInterrupt:
        # Shown even with --quiet: how to go on is what an interrupted user needs.
        print(
            f"\ninterrupted: the measured trials of job {job_id} are kept; continue "
            f"with `autotune run {workload} --resume`",
            file=sys.stderr,
        )
        raise typer.Exit(130) from None
    document = finished.recommendation
    if document is None:
        raise typer.Exit(1)
    _present_answer(document, job_id, out, db, json_output, shown)


def _present_answer(
    document: dict[str, Any],
    job_id: int,
    out: Path,
    db: str | None,
    json_output: bool,
    shown: Console,
) -> None:
    """The summary on ``shown``, the document to ``out`` (and stdout with ``--json``)."""
    from autotune.cli._progress import search_ending, summary_table

    shown.print(summary_table(document))
    shown.print(document["verdict"])
    shown.print(f"[bold]diagnosis[/]: {document['diagnosis']}")
    counts = document["trials"]
    shown.print(
        f"trials: {counts['total']} measured, {counts['ok']} ok, {counts['failed']} "
        f"failed, {counts['skipped_infeasible']} skipped as infeasible"
        f"{_skipped_slow(counts)}{search_ending(counts)}"
    )
    _write_json(out, document)
    shown.print(f"wrote {out}")
    shown.print(report_hint(job_id, db), soft_wrap=True)  # one line, to copy
    if json_output:
        sys.stdout.write(_json_text(document))


def _say_remembered(job: Job) -> None:
    """Say on stderr that ``job`` answers, and how old its answer is (even with ``--quiet``:
    the answer is no new measurement, and how to get one is what the user may need)."""
    finished = job.finished_at or job.created_at
    print(
        f"job {job.id} already answered this workload on this device "
        f"{_age((utcnow() - finished).total_seconds())} ago (its answer follows); pass --fresh "
        "to measure again",
        file=sys.stderr,
    )


def _age(seconds: float) -> str:
    """``12 minutes``, ``5 hours``, ``3 days``: how old an answer is, to the unit that reads."""
    minutes = max(0, round(seconds / 60))
    if minutes < 120:
        return f"{minutes} minutes"
    if minutes < 48 * 60:
        return f"{round(minutes / 60)} hours"
    return f"{round(minutes / 60 / 24)} days"


def _skipped_slow(counts: dict[str, Any]) -> str:
    skipped = counts.get("skipped_predicted_slow", 0)  # absent from documents before it
    return f", {skipped} skipped as predicted far slower than the best" if skipped else ""


@app.command("bench")
def bench_command(
    workload: Annotated[str, typer.Argument(help="The workload the configuration is for.")],
    config: Annotated[Path, typer.Option(help="A recommendation JSON or a knob mapping.")],
    repeats: Annotated[int, typer.Option(min=1, max=100, help="Fresh processes to run.")] = 3,
    db: DbOption = None,
    device: DeviceOption = "auto",
    max_memory: MaxMemoryOption = None,
    timeout: TimeoutOption = 180.0,
    min_seconds: MinSecondsOption = _PLAN.min_seconds,
    min_steps: MinStepsOption = _PLAN.min_steps,
    warmup_steps: WarmupStepsOption = _PLAN.warmup_steps,
    compile_timeout: CompileTimeoutOption = DEFAULT_COMPILE_TIMEOUT_S,
    debug: DebugOption = False,
) -> None:
    """Re-measure one configuration of WORKLOAD in fresh processes."""
    parse_ref(workload)
    chosen = read_config(config)
    options = _options(
        workload=workload,
        device=device,
        max_memory=max_memory,
        trial_timeout_s=timeout,
        min_seconds=min_seconds,
        min_steps=min_steps,
        warmup_steps=warmup_steps,
        compile_timeout_s=compile_timeout,
    )
    from autotune.cli._progress import RichReporter

    shown = _progress_console()
    job = bench(open_database(db), options, chosen, repeats, RichReporter(shown))
    runs = [TrialRecord.model_validate(trial) for trial in job.trials]
    speeds = sorted(run.samples_per_s for run in runs if run.usable and run.samples_per_s)
    if not speeds:
        shown.print("no run finished usable; see the outcomes above")
        raise typer.Exit(3)  # no configuration fits, as the run command's exit code says
    median = (
        speeds[len(speeds) // 2]
        if len(speeds) % 2
        else sum(speeds[len(speeds) // 2 - 1 : len(speeds) // 2 + 1]) / 2
    )
    console.print(
        f"job {job.id}: median {median:,.1f} samples/s over {len(speeds)} usable runs "
        f"(min {speeds[0]:,.1f}, max {speeds[-1]:,.1f})"
    )
    compile_times = sorted(run.compile_s for run in runs if run.usable and run.compile_s)
    if compile_times:
        console.print(
            f"torch.compile took {compile_times[len(compile_times) // 2]:,.1f} s "
            "(median) before that steady state, not counted in it"
        )


@app.command()
def version() -> None:
    """Print the versions and the device a bug report needs."""
    from autotune.cli._versions import versions_report

    for name, value in versions_report():
        console.print(f"{name + ':':<12} {value}", soft_wrap=True)


@app.command()
def workloads() -> None:
    """List the built-in workloads (use them as builtin:NAME)."""
    from autotune.workload.builtins import BUILTINS

    for name in builtin_names():
        console.print(f"builtin:{name:<20} {BUILTINS[name]().description}")


register_service_commands(app)
register_report_command(app)
register_schema_command(app)
register_token_command(app)
