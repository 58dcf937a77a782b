"""``autotune serve|worker|submit|jobs``: the service's commands, thin faces over
:mod:`autotune.service` and the REST API."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from autotune.errors import ConfigError
from autotune.service import ClaimPolicy, ServiceClient, Worker
from autotune.service._client import DEFAULT_SERVER
from autotune.space import parse_assignments
from autotune.store import Database, lock_dir, open_database, resolve_url

if TYPE_CHECKING:
    import uvicorn
    from autotune_api.settings import Settings

console = Console(highlight=False)

ServerOption = Annotated[
    str, typer.Option(envvar="AUTOTUNE_SERVER", help="The autotune server's URL.")
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        envvar="AUTOTUNE_API_TOKEN",
        show_default=False,
        help="The server's bearer token (default: $AUTOTUNE_API_TOKEN).",
    ),
]
DbOption = Annotated[
    str | None,
    typer.Option(
        "--db", help="Database URL or SQLite file (default: $AUTOTUNE_DB or ./autotune.db)."
    ),
]
HeartbeatTimeout = Annotated[
    float,
    typer.Option(
        min=1, help="Seconds without a heartbeat after which a running job is taken over."
    ),
]
DeviceOption = Annotated[
    str,
    typer.Option(help="The device this worker owns; jobs submitted with device auto run on it."),
]


def _logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(name)s %(message)s")


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    db: DbOption = None,
    workloads_dir: Annotated[
        Path | None, typer.Option(help="Directory of workload files; NAME.py is submitted as NAME.")
    ] = None,
    worker: Annotated[
        bool,
        typer.Option(help="Run a worker inside the server (--no-worker: only separate workers)."),
    ] = True,
    device: DeviceOption = "auto",
    heartbeat_timeout: HeartbeatTimeout = 30.0,
    insecure_allow_remote: Annotated[
        bool,
        typer.Option(
            "--insecure-allow-remote",
            help="Serve on a non-loopback address without AUTOTUNE_API_TOKEN: anyone who can "
            "reach the port can run jobs.",
        ),
    ] = False,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Serve the REST API (and one embedded worker) on HOST:PORT."""
    import uvicorn
    from autotune_api.settings import load_settings

    settings = load_settings(
        host=host,
        port=port,
        db=db,
        workloads_dir=workloads_dir,
        embedded_worker=worker,
        device=device,
        heartbeat_timeout_s=heartbeat_timeout,
        heartbeat_interval_s=min(5.0, heartbeat_timeout / 3),
        insecure_allow_remote=insecure_allow_remote,
    )
    _logging(log_level)
    # An unusable lock directory or an old schema: one sentence here, not a traceback from
    # the server's startup.
    if settings.embedded_worker:
        lock_dir()
    open_database(settings.db).dispose()
    uvicorn.Server(uvicorn_config(settings, log_level)).run()


def uvicorn_config(settings: Settings, log_level: str) -> uvicorn.Config:
    """How ``serve`` runs the API: past ``limit_concurrency`` connections uvicorn answers 503
    instead of queueing without end."""
    import uvicorn
    from autotune_api.main import create_app

    return uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=log_level.lower(),
        timeout_graceful_shutdown=30,
        limit_concurrency=settings.limit_concurrency,
    )


def worker(
    db: DbOption = None,
    device: DeviceOption = "auto",
    devices: Annotated[
        int,
        typer.Option(
            min=1,
            help="GPUs this worker owns from --device on, all of one class: it claims jobs "
            "of up to that many ranks (--nproc-per-node). On a CPU, jobs of up to its cores.",
        ),
    ] = 1,
    heartbeat_timeout: HeartbeatTimeout = 30.0,
    max_attempts: Annotated[
        int, typer.Option(min=1, help="Takeovers after which an abandoned job is failed.")
    ] = 3,
    poll_interval: Annotated[
        float, typer.Option(min=0.05, help="Seconds between looks at an empty queue.")
    ] = 1.0,
    workloads_dir: Annotated[
        Path | None,
        typer.Option(
            envvar="AUTOTUNE_WORKLOADS_DIR",
            help="The server's directory of workload files; jobs naming a workload that is not "
            "built in, installed or in it are failed unrun.",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Claim and run queued jobs from the database, one trial at a time, until stopped.

    SIGTERM or Ctrl-C stops the running trial and puts its job back in the queue.
    """
    if workloads_dir is not None and not workloads_dir.is_dir():
        raise ConfigError(
            f"workloads directory {str(workloads_dir)!r} does not exist; create it or point "
            "--workloads-dir (AUTOTUNE_WORKLOADS_DIR) at the server's one"
        )
    lock_dir()
    _logging(log_level)
    runner = Worker(
        open_database(db),
        ClaimPolicy(stale_after_s=heartbeat_timeout, max_attempts=max_attempts),
        heartbeat_interval_s=min(5.0, heartbeat_timeout / 3),
        poll_interval_s=poll_interval,
        device=device,
        devices=devices,
        workloads_dir=workloads_dir.resolve() if workloads_dir is not None else None,
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: runner.stop())
    runner.run()


def submit(
    workload: Annotated[str, typer.Argument(help="A name from `GET /v1/workloads`.")],
    trials: Annotated[int | None, typer.Option(help="Configurations to measure.")] = None,
    fix: Annotated[list[str] | None, typer.Option(help="Fix a knob: --fix amp=bf16.")] = None,
    range_: Annotated[
        list[str] | None, typer.Option("--range", help="Narrow a knob: --range batch_size=16..256.")
    ] = None,
    baseline: Annotated[
        list[str] | None,
        typer.Option(help="Your current setting of a knob: --baseline num_workers=4."),
    ] = None,
    effective_batch: Annotated[
        int | None, typer.Option(help="Hold batch_size x accumulation steps at this value.")
    ] = None,
    max_memory: Annotated[
        str | None, typer.Option(help="Memory budget: bytes, 8GB, 512MiB or 80% of the device.")
    ] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds one trial may take.")] = None,
    time_budget: Annotated[
        float | None,
        typer.Option(
            help="Seconds the whole job may take, profile and confirmation included: the search "
            "stops in time to confirm its best beside the baseline."
        ),
    ] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda[:N].")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the sampler and trials.")] = None,
    epochs: Annotated[
        int | None,
        typer.Option(help="Your run's length in epochs (default 1), for torch.compile's time."),
    ] = None,
    steps: Annotated[
        int | None, typer.Option(help="Your run's length in optimizer steps, instead of --epochs.")
    ] = None,
    device_class: Annotated[
        str | None,
        typer.Option(
            help="Run only on this device class, as `autotune devices` lists them "
            "(e.g. 'cuda: <GPU name>')."
        ),
    ] = None,
    on_new_hardware: Annotated[
        str | None,
        typer.Option(
            help="If the job resumes on other hardware or software: fresh (measure anew, keep the "
            "old trials apart; the default) or refuse (fail)."
        ),
    ] = None,
    nproc_per_node: Annotated[
        int | None,
        typer.Option(
            help="Measure every trial as this many DDP ranks; only a worker owning that many "
            "devices of the class claims it."
        ),
    ] = None,
    host_share: Annotated[
        int | None,
        typer.Option(help="Ranks your launch runs on one host (default: --nproc-per-node)."),
    ] = None,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh",
            help="Queue a job even where a succeeded one already answered the same question; "
            "without it, the server answers with that job.",
        ),
    ] = False,
    server: ServerOption = DEFAULT_SERVER,
    token: TokenOption = None,
) -> None:
    """Queue a tuning job on an autotune server; the options are those of `autotune run`."""
    body: dict[str, Any] = {
        "workload": workload,
        "n_trials": trials,
        "effective_batch": effective_batch,
        "max_memory": max_memory,
        "trial_timeout_s": timeout,
        "time_budget_s": time_budget,
        "device": device,
        "seed": seed,
        "epochs": epochs,
        "steps": steps,
        "device_class": device_class,
        "on_new_hardware": on_new_hardware,
        "nproc_per_node": nproc_per_node,
        "host_share": host_share,
        "fixed": parse_assignments(fix or [], "--fix") or None,
        "ranges": parse_assignments(range_ or [], "--range") or None,
        "baseline": parse_assignments(baseline or [], "--baseline") or None,
        "fresh": fresh or None,
    }
    job = ServiceClient(server, token).submit({k: v for k, v in body.items() if v is not None})
    console.print(
        f"job {job['id']} {job['status']}: follow it with `autotune jobs show {job['id']}`"
    )


def devices(server: ServerOption = DEFAULT_SERVER, token: TokenOption = None) -> None:
    """The device classes of the live workers: what `autotune submit --device-class` takes."""
    page = ServiceClient(server, token).devices()
    for entry in page["data"]:
        typer.echo(
            f"{entry['device_class']}  ({entry['workers']} worker"
            f"{'' if entry['workers'] == 1 else 's'})"
        )
    if not page["data"]:
        typer.echo("no live workers; start `autotune worker` on a device")


jobs_app = typer.Typer(
    help="List, inspect and cancel jobs on an autotune server.", no_args_is_help=True
)


def _print_json(document: dict[str, Any]) -> None:
    typer.echo(json.dumps(document, indent=2))


@jobs_app.command("list")
def list_jobs(
    status: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100, help="Jobs to show.")] = 20,
    server: ServerOption = DEFAULT_SERVER,
    token: TokenOption = None,
) -> None:
    """The newest jobs: status, progress and best speed so far."""
    page = ServiceClient(server, token).jobs(status=status, limit=limit)
    row = "{:>6}  {:<10} {:>7} {:>15}  {:<20} {}"
    typer.echo(row.format("id", "status", "trials", "best samples/s", "created (UTC)", "workload"))
    for job in page["data"]:
        progress, best = job["progress"], job["progress"]["best"]
        typer.echo(
            row.format(
                job["id"],
                job["status"],
                f"{progress['trials_done']}/{progress['trials_budget']}",
                f"{best['samples_per_s']:,.1f}" if best else "-",
                job["created_at"][:19].replace("T", " "),
                job["workload"],
            )
        )
    typer.echo(f"{len(page['data'])} of {page['count']} jobs")


@jobs_app.command("show")
def show_job(
    job_id: Annotated[int, typer.Argument(help="The job's id.")],
    server: ServerOption = DEFAULT_SERVER,
    token: TokenOption = None,
) -> None:
    """One job as JSON: status, progress, timestamps, error."""
    _print_json(ServiceClient(server, token).job(job_id))


@jobs_app.command("cancel")
def cancel_job(
    job_id: Annotated[int, typer.Argument(help="The job's id.")],
    server: ServerOption = DEFAULT_SERVER,
    token: TokenOption = None,
) -> None:
    """Cancel a job; a running trial is stopped and what was measured is kept."""
    job = ServiceClient(server, token).cancel(job_id)
    state = "cancelled" if job["status"] == "cancelled" else "cancel requested"
    console.print(f"job {job_id}: {state}")


@jobs_app.command("recommendation")
def show_recommendation(
    job_id: Annotated[int, typer.Argument(help="The job's id.")],
    out: Annotated[Path | None, typer.Option(help="Write the JSON here instead.")] = None,
    server: ServerOption = DEFAULT_SERVER,
    token: TokenOption = None,
) -> None:
    """The recommendation JSON of a succeeded job (as `autotune run --out` writes it)."""
    document = ServiceClient(server, token).recommendation(job_id)
    if out is None:
        _print_json(document)
    else:
        out.write_text(json.dumps(document, indent=2) + "\n")
        console.print(f"wrote {out}")


db_app = typer.Typer(
    help="The database's schema: upgrade it after installing a new autotune.", no_args_is_help=True
)


@db_app.command("upgrade")
def upgrade_db(db: DbOption = None) -> None:
    """Upgrade the database's schema to this autotune's (back the database up first).

    A database from before migrations existed is recognised and upgraded; an up-to-date one is
    left alone. Run it once, from one machine, while no worker or server uses the database.
    """
    database = Database(resolve_url(db))
    try:
        before, after = database.upgrade_schema()
    finally:
        database.dispose()
    if before == after:
        console.print(f"{database.shown_url} is up to date (revision {after})")
    else:
        console.print(
            f"upgraded {database.shown_url} from "
            f"{'before migrations' if before is None else f'revision {before}'} "
            f"to revision {after}"
        )


def register(app: typer.Typer) -> None:
    """Add the service's commands to the ``autotune`` app."""
    app.command()(serve)
    app.command()(worker)
    app.command()(submit)
    app.command()(devices)
    app.add_typer(jobs_app, name="jobs")
    app.add_typer(db_app, name="db")
