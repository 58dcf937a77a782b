"""Re-measuring one configuration, stored as a job of its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from autotune.errors import ConfigError, first_validation_error
from autotune.measure import device_identity
from autotune.runner import TrialLauncher, probe_workload, run_trial
from autotune.space import Config, SearchSpace
from autotune.store import Database, Job, Trial, device_lock, utcnow
from autotune.tuner._options import TuneOptions
from autotune.tuner._record import trial_row
from autotune.tuner._reporter import Reporter


def read_config(path: str | Path) -> Config:
    """A configuration from a recommendation JSON (its ``config``) or a bare knob mapping."""
    try:
        document: Any = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"--config {str(path)!r} does not exist; pass the JSON that `autotune run --out` wrote"
        ) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(
            f"--config {str(path)!r} is not readable JSON ({exc}); pass the "
            "JSON that `autotune run --out` wrote"
        ) from None
    values = document.get("config", document) if isinstance(document, dict) else None
    if not isinstance(values, dict):
        raise ConfigError(
            f"--config {str(path)!r} holds no configuration object; pass a "
            "recommendation JSON or a mapping of knob values"
        )
    try:
        return Config.model_validate(values).normalized()
    except ValidationError as exc:
        where, message = first_validation_error(exc)
        raise ConfigError(f"--config {str(path)!r}: {where}: {message}") from None


def bench(
    db: Database,
    options: TuneOptions,
    config: Config,
    repeats: int,
    reporter: Reporter | None = None,
) -> Job:
    """Measure ``config`` ``repeats`` times in fresh processes; store and return the job."""
    with TrialLauncher(options.workload, options.device):  # one warm server for every repeat
        return _bench(db, options, config, repeats, reporter or Reporter())


def _bench(
    db: Database, options: TuneOptions, config: Config, repeats: int, reporter: Reporter
) -> Job:
    device_key = device_identity(options.device).key
    with device_lock(db, device_key):
        probe = probe_workload(options.workload, options.device, options.trial_timeout_s)
    space = SearchSpace(probe.device, probe.workload)
    for name, reason in space.not_applicable.items():
        if getattr(config, name) != getattr(Config(), name):
            raise ConfigError(f"--config sets {name}, which {reason}; remove it from the JSON")
    budget = options.memory_budget_bytes(probe.device.memory_bytes)
    plan = options.measure_plan()
    with db.session(immediate=True) as session:
        job = Job(
            workload=options.workload,
            workload_name=probe.workload.name,
            options=options.model_dump(),
            status="running",
            started_at=utcnow(),
            device=probe.device.model_dump(),
            fingerprint=probe.fingerprint,
        )
        session.add(job)
        session.flush()
        job_id = job.id
    reporter.phase_started("bench", repeats)
    for number in range(1, repeats + 1):
        reporter.trial_started("bench", config)
        with device_lock(db, device_key):
            result = run_trial(
                options.workload,
                config,
                options.device,
                plan,
                options.trial_timeout_for(config),
                memory_budget_bytes=budget,
                budget_is_host_memory=not probe.device.is_cuda,
                device_uuid=probe.device_uuid,
            )
        row: Trial = trial_row(job_id, number, "bench", result, None)
        with db.session(immediate=True) as session:
            session.add(row)
        reporter.trial_finished(row)
    with db.session(immediate=True) as session:
        stored = session.get(Job, job_id)
        assert stored is not None
        stored.status, stored.finished_at = "succeeded", utcnow()
        list(stored.trials)  # load the rows before the session closes
        session.flush()
        session.expunge_all()
        return stored
