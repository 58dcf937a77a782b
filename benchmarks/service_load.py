"""``python -m benchmarks.service_load``: the service under many clients while its worker tunes.

Starts a real ``autotune serve`` (API and embedded worker, ``--device cpu``) on a free loopback
port over a fresh database (a SQLite file, or with ``--db postgresql+psycopg://...`` a private
schema dropped afterwards), submits one real tuning job and waits until the worker runs it. Then
``--clients`` clients, each a closed loop that sleeps ``--think-ms`` (uniform 0..2x) between
requests, send for ``--seconds`` a mix of what users and dashboards send:

- ``GET /healthz``, ``GET /v1/jobs``, ``GET /v1/jobs/{id}``, ``GET /v1/jobs/{id}/trials``;
- ``POST /v1/jobs``: new submissions (the server's submission rate and queue limits are raised,
  so that each is a real write; a 429 would still count as an expected answer);
- ``POST /v1/jobs`` with bad bodies, each of which must be answered 422.

A separate process asks ``/healthz`` every ``--probe-ms`` meanwhile: its latencies are the
server's, without the load clients' own event loop in them. That loop's lag (how late it wakes
from a 50 ms sleep) is reported too, to tell the clients' tail from the server's. After the
load, the database is read directly: every job's trial numbers must be 1..N with none twice,
every trial a client was shown must still be stored as shown, and every accepted submission
must be stored once.

Prints one JSON line (the summary) and then a readable table. Loopback only, bounded in clients,
time and submissions. Run it on an otherwise idle machine: every figure is a latency.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
from sqlalchemy import create_engine, select, text

from autotune.store import LOCK_DIR_ENV, Job, Trial, open_database

ROOT = Path(__file__).resolve().parent.parent
#: The tuning job the worker runs under the load: short trials, so that many are stored.
JOB: dict[str, Any] = {
    "n_trials": 20,
    "min_seconds": 0.3,
    "min_steps": 3,
    "warmup_steps": 1,
    "confirm_rounds": 1,
    "confirm_top": 1,
    "profile": False,
    "fixed": {"compile": "off"},
    "device": "cpu",
}
#: What the load's submissions ask for (they queue behind the job above).
SUBMISSION: dict[str, Any] = {"workload": "builtin:slow-storage", "n_trials": 2, "device": "cpu"}
#: Bodies the server must refuse with 422: each a different validator.
BAD_BODIES: list[str] = [
    json.dumps({"workload": "no-such-workload"}),
    json.dumps({"workload": "builtin:image-cnn", "n_trials": -1}),
    json.dumps({"workload": "builtin:image-cnn", "not_an_option": 1}),
    json.dumps({"workload": "builtin:image-cnn", "max_memory": "lots"}),
    '{"workload": "builtin:image-cnn", "fixed": {"batch_size": Infinity}}',
    '{"workload": ',
]
#: Request kinds, their share of the mix, and the answers each is expected to get.
MIX: dict[str, tuple[float, frozenset[int]]] = {
    "healthz": (0.30, frozenset({200})),
    "list_jobs": (0.20, frozenset({200})),
    "read_job": (0.20, frozenset({200})),
    "read_trials": (0.15, frozenset({200})),
    "submit": (0.10, frozenset({200, 202, 429})),
    "bad_body": (0.05, frozenset({422})),
}


@dataclass
class Answer:
    kind: str
    status: int | None  # None: no answer (connection error or timeout)
    seconds: float


@dataclass
class Observed:
    """What the clients were shown: accepted job ids and trials as (job, number) -> config key."""

    answers: list[Answer] = field(default_factory=list)
    accepted_ids: list[int] = field(default_factory=list)
    trials_seen: dict[tuple[int, int], str] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    #: How late the clients' own event loop woke from each of its ticks (s): a client's
    #: latency includes this wait, which is the load generator's and not the server's.
    loop_lag: list[float] = field(default_factory=list)


# -- the server --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def fresh_database(url: str | None, directory: Path) -> Iterator[str]:
    """A SQLite file in ``directory``, or a private schema of the PostgreSQL at ``url``."""
    if url is None:
        yield f"sqlite:///{directory / 'service.db'}"
        return
    admin = create_engine(url)
    schema = f"autotune_load_{uuid.uuid4().hex[:10]}"
    with admin.begin() as connection:
        connection.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{url}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as connection:
            connection.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@contextlib.contextmanager
def serve(db_url: str, directory: Path, database_requests: int | None = None) -> Iterator[str]:
    """``autotune serve`` with its embedded worker; yields its base URL."""
    port = _free_port()
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")},
        "AUTOTUNE_SUBMISSIONS_PER_MINUTE": "1000000",
        "AUTOTUNE_MAX_QUEUED_JOBS": "1000000",
    }
    if database_requests is not None:
        environment["AUTOTUNE_DATABASE_REQUESTS"] = str(database_requests)
    if LOCK_DIR_ENV in os.environ:  # a test session's private device locks
        environment[LOCK_DIR_ENV] = os.environ[LOCK_DIR_ENV]
    log_path = directory / "server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-c", "from autotune.cli import main; main()", "serve"]
            + ["--port", str(port), "--db", db_url, "--worker", "--device", "cpu"]
            + ["--log-level", "warning"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _answers(base):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"autotune serve did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        yield base
    finally:
        _stop(server)


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _stop(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL for the server and its trials if it has not stopped in 30 s."""
    children: list[psutil.Process] = []
    with contextlib.suppress(psutil.NoSuchProcess):
        children = psutil.Process(server.pid).children(recursive=True)
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(timeout=10)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()


def start_job(base: str, workload: str, budget_s: float) -> int:
    """Submit the job the worker runs under the load; return its id once it runs."""
    body = {"workload": workload, **JOB, "time_budget_s": budget_s}
    answer = httpx.post(f"{base}/v1/jobs", json=body, timeout=30)
    answer.raise_for_status()
    job_id = int(answer.json()["id"])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = httpx.get(f"{base}/v1/jobs/{job_id}", timeout=30).json()["status"]
        if status == "running":
            return job_id
        if status != "queued":
            raise RuntimeError(f"the job under load ended {status} before the load began")
        time.sleep(0.2)
    raise RuntimeError("the worker did not start the job within 120 s")


# -- the load ----------------------------------------------------------------------------------


async def _request(http: httpx.AsyncClient, kind: str, job_id: int, rng: random.Random) -> Any:
    if kind == "healthz":
        return await http.get("/healthz")
    if kind == "list_jobs":
        return await http.get("/v1/jobs", params={"limit": 20})
    if kind == "read_job":
        return await http.get(f"/v1/jobs/{job_id}")
    if kind == "read_trials":
        return await http.get(f"/v1/jobs/{job_id}/trials", params={"limit": 100})
    if kind == "submit":
        return await http.post("/v1/jobs", json={**SUBMISSION, "seed": rng.randrange(2**31)})
    body = rng.choice(BAD_BODIES)
    return await http.post("/v1/jobs", content=body, headers={"content-type": "application/json"})


def _remember(observed: Observed, kind: str, job_id: int, response: httpx.Response) -> None:
    if kind == "submit" and response.status_code == 202:
        observed.accepted_ids.append(int(response.json()["id"]))
    elif kind == "read_trials" and response.status_code == 200:
        for trial in response.json()["data"]:
            observed.trials_seen[(job_id, trial["number"])] = json.dumps(
                trial["config"], sort_keys=True
            )


async def _client(
    base: str, job_id: int, until: float, think_s: float, seed: int, observed: Observed
) -> None:
    rng = random.Random(seed)
    kinds, weights = list(MIX), [share for share, _ in MIX.values()]
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        while time.monotonic() < until:
            kind = rng.choices(kinds, weights)[0]
            started = time.perf_counter()
            try:
                response = await _request(http, kind, job_id, rng)
            except httpx.HTTPError as exc:
                observed.answers.append(Answer(kind, None, time.perf_counter() - started))
                observed.errors[type(exc).__name__] += 1
            else:
                seconds = time.perf_counter() - started
                observed.answers.append(Answer(kind, response.status_code, seconds))
                _remember(observed, kind, job_id, response)
            await asyncio.sleep(rng.uniform(0, 2 * think_s))


async def _watch_loop(until: float, tick_s: float, lag: list[float]) -> None:
    while time.monotonic() < until:
        started = time.perf_counter()
        await asyncio.sleep(tick_s)
        lag.append(max(0.0, time.perf_counter() - started - tick_s))


async def run_load(
    base: str, job_id: int, clients: int, seconds: float, think_s: float
) -> Observed:
    observed = Observed()
    until = time.monotonic() + seconds
    await asyncio.gather(
        _watch_loop(until, 0.05, observed.loop_lag),
        *(_client(base, job_id, until, think_s, seed, observed) for seed in range(clients)),
    )
    return observed


def probe(base: str, seconds: float, interval_s: float, out: Any) -> None:
    """In its own process: ``/healthz`` every ``interval_s``; puts the latencies (s) on ``out``."""
    latencies: list[float | None] = []
    until = time.monotonic() + seconds
    with httpx.Client(base_url=base, timeout=30) as http:
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                ok = http.get("/healthz").status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append(time.perf_counter() - started if ok else None)
            time.sleep(max(0.0, interval_s - (time.perf_counter() - started)))
    out.put(latencies)


# -- after the load ----------------------------------------------------------------------------


def check_store(db_url: str, job_id: int, observed: Observed) -> dict[str, Any]:
    """Trials and submissions as the database holds them, against what clients were shown."""
    database = open_database(db_url)
    try:
        with database.session() as session:
            rows = session.execute(select(Trial.job_id, Trial.number, Trial.config)).all()
            job_ids = list(session.scalars(select(Job.id)))
            job = session.get(Job, job_id)
            status = job.status if job is not None else "missing"
    finally:
        database.dispose()
    numbers: dict[int, list[int]] = defaultdict(list)
    stored: dict[tuple[int, int], str] = {}
    for trial_job, number, config in rows:
        numbers[trial_job].append(number)
        stored[(trial_job, number)] = json.dumps(config, sort_keys=True)
    duplicated = {
        j: sorted(n for n, c in Counter(ns).items() if c > 1) for j, ns in numbers.items()
    }
    gaps = {j: sorted(set(range(1, max(ns) + 1)) - set(ns)) for j, ns in numbers.items()}
    changed = [key for key, config in observed.trials_seen.items() if stored.get(key) != config]
    accepted = Counter(observed.accepted_ids)
    return {
        "job_id": job_id,
        "job_status": status,
        "job_trials": len(numbers.get(job_id, [])),
        "trials_stored": len(rows),
        "duplicate_trials": sum(len(n) for n in duplicated.values()),
        "missing_trial_numbers": sum(len(n) for n in gaps.values()),
        "trials_seen_by_clients": len(observed.trials_seen),
        "trials_seen_but_not_stored_as_seen": len(changed),
        "submissions_accepted": len(observed.accepted_ids),
        "submission_ids_answered_twice": sum(1 for c in accepted.values() if c > 1),
        "submissions_not_stored": len(set(accepted) - set(job_ids)),
    }


def _ms(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {
        "p50_ms": round(1000 * statistics.median(ordered), 1),
        "p99_ms": round(1000 * p99, 1),
        "max_ms": round(1000 * ordered[-1], 1),
    }


def _machine() -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return {
        "cpu_model": model,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "commit": commit or "unknown",
    }


def summarise(
    args: argparse.Namespace, observed: Observed, probed: list[float | None], store: dict[str, Any]
) -> dict[str, Any]:
    by_kind: dict[str, Any] = {}
    for kind, (_, expected) in MIX.items():
        answers = [a for a in observed.answers if a.kind == kind]
        answered = Counter(str(a.status) for a in answers if a.status is not None)
        by_kind[kind] = {
            "requests": len(answers),
            "statuses": dict(sorted(answered.items())),
            "unexpected": sum(1 for a in answers if a.status not in expected),
            **_ms([a.seconds for a in answers if a.status is not None]),
        }
    statuses = Counter(a.status for a in observed.answers if a.status is not None)
    return {
        "benchmark": "service_load",
        "database": "postgresql" if args.db else "sqlite",
        "clients": args.clients,
        "seconds": args.seconds,
        "think_ms": args.think_ms,
        "database_requests": args.database_requests,
        "workload": args.workload,
        "requests": len(observed.answers),
        "requests_per_s": round(len(observed.answers) / args.seconds, 1),
        "statuses": {str(s): n for s, n in sorted(statuses.items())},
        "server_errors": sum(n for s, n in statuses.items() if s >= 500),
        "unanswered": sum(observed.errors.values()),
        "unanswered_by_error": dict(observed.errors),
        "unexpected": sum(k["unexpected"] for k in by_kind.values()),
        "by_kind": by_kind,
        "healthz_clients": {k: by_kind["healthz"][k] for k in ("p50_ms", "p99_ms", "max_ms")},
        "client_loop_lag": _ms(observed.loop_lag),
        "healthz_probe": {
            "requests": len(probed),
            "failed": sum(1 for p in probed if p is None),
            **_ms([p for p in probed if p is not None]),
        },
        "store": store,
        "machine": _machine(),
    }


def table(summary: dict[str, Any]) -> str:
    lines = [
        "| request | count | answers | unexpected | p50 ms | p99 ms | max ms |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    rows = [(kind, row) for kind, row in summary["by_kind"].items()]
    rows.append(("healthz (probe)", {**summary["healthz_probe"], "statuses": {}, "unexpected": ""}))
    for kind, row in rows:
        answers = ", ".join(f"{s}: {n}" for s, n in row["statuses"].items())
        count = row.get("requests", "")
        lines.append(
            f"| {kind} | {count} | {answers} | {row['unexpected']} | {row['p50_ms']} "
            f"| {row['p99_ms']} | {row['max_ms']} |"
        )
    lag = summary["client_loop_lag"]
    lines.append(
        f"| (clients' own event loop, lag) | | | | {lag['p50_ms']} | {lag['p99_ms']} "
        f"| {lag['max_ms']} |"
    )
    store = summary["store"]
    lines += ["", *(f"- {key}: {value}" for key, value in store.items())]
    machine = summary["machine"]
    lines.append(
        f"- {summary['requests']} requests ({summary['requests_per_s']}/s), "
        f"{summary['server_errors']} 5xx, {summary['unanswered']} unanswered; "
        f"{machine['cpu_model']}, {machine['cores']} cores, {machine['date']}, "
        f"commit {machine['commit']}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.service_load", description=__doc__)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--think-ms", type=float, default=100.0, help="mean pause between a client's requests"
    )
    parser.add_argument("--probe-ms", type=float, default=100.0, help="the /healthz probe's period")
    parser.add_argument("--workload", default="builtin:image-cnn", help="the job the worker runs")
    parser.add_argument(
        "--db", default=None, help="a PostgreSQL URL to use a fresh schema of (default: SQLite)"
    )
    parser.add_argument(
        "--database-requests",
        type=int,
        default=None,
        help="the server's AUTOTUNE_DATABASE_REQUESTS (default: the server's own default)",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.clients <= 200 or not 0 < args.seconds <= 600:
        parser.error("give 1-200 clients and at most 600 seconds: the load is bounded")
    directory = Path(tempfile.mkdtemp(prefix="autotune-load-"))
    try:
        with (
            fresh_database(args.db, directory) as db_url,
            serve(db_url, directory, args.database_requests) as base,
        ):
            job_id = start_job(base, args.workload, budget_s=args.seconds * 3 + 60)
            trials_before = httpx.get(f"{base}/v1/jobs/{job_id}/trials", timeout=30).json()["count"]
            results = multiprocessing.get_context("spawn").Queue()
            prober = multiprocessing.get_context("spawn").Process(
                target=probe, args=(base, args.seconds, args.probe_ms / 1000, results)
            )
            prober.start()
            observed = asyncio.run(
                run_load(base, job_id, args.clients, args.seconds, args.think_ms / 1000)
            )
            probed = results.get(timeout=60)
            prober.join(timeout=30)
            store = check_store(db_url, job_id, observed)
        store["job_trials_before_load"] = trials_before
        store["job_progressed"] = (
            store["job_status"] == "succeeded" or store["job_trials"] > trials_before
        )
        summary = summarise(args, observed, probed, store)
        if summary["server_errors"] or summary["unanswered"]:
            log = (directory / "server.log").read_text(errors="replace").splitlines()
            print("\n".join(["the server's log ends:", *log[-40:]]), file=sys.stderr)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps(summary), flush=True)
    print(table(summary))


if __name__ == "__main__":
    main()
