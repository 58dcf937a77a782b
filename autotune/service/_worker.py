"""A worker: claims jobs from the database and runs them one at a time, heartbeating.

One worker owns one device (or several GPUs of one class, for jobs of several DDP ranks) and
runs one trial at a time on it; the trials themselves run in
their own processes (see :mod:`autotune.runner`), so a worker is mostly waiting. While a job
runs, a heartbeat thread refreshes the job's lease and turns a requested cancel, a lost lease
or a shutdown into the ``cancel`` event that stops the running trial promptly.

A worker trusts nothing the database says about what code to run: a claimed job's stored
workload reference must be one its own catalog offers (built-ins, installed entry points, its
workloads directory), or the job fails before anything is imported, so that write access to
the database is not code execution on every worker.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Protocol

from optuna.exceptions import StorageInternalError
from sqlalchemy.exc import SQLAlchemyError

from autotune.errors import AutotuneError, ConfigError, LeaseLostError
from autotune.measure import device_identity
from autotune.runner import rank_devices, withhold_from_trials
from autotune.service._catalog import WorkloadCatalog
from autotune.service._fleet import announce, retire
from autotune.service._queue import ClaimPolicy, claim_next, fail, heartbeat, release
from autotune.store import Database, Trial

log = logging.getLogger("autotune.worker")

#: The database went away mid-job (a restart, the network); Optuna wraps it in its own error.
DATABASE_FAULTS = (SQLAlchemyError, StorageInternalError)


class JobRunner(Protocol):
    """What runs a claimed job: :func:`autotune.tuner.run_job`, or a stand-in in tests."""

    def __call__(
        self, db: Database, job_id: int, *, cancel: threading.Event, worker_id: str
    ) -> Any: ...


def _tuner_run_job(db: Database, job_id: int, *, cancel: threading.Event, worker_id: str) -> Any:
    from autotune.tuner import Reporter, run_job

    class LogReporter(Reporter):
        def measurement_set_started(self, measurement_set: int, changes: list[str]) -> None:
            log.info(
                "job %d: this device differs from the one measured so far (%s); "
                "measuring anew as set %d",
                job_id,
                ", ".join(changes),
                measurement_set,
            )

        def trial_finished(self, trial: Trial) -> None:
            speed = f"{trial.samples_per_s:,.1f} samples/s" if trial.samples_per_s else "-"
            log.info(
                "job %d trial %d (%s): %s, %s",
                job_id,
                trial.number,
                trial.phase,
                trial.outcome,
                speed,
            )

    return run_job(db, job_id, LogReporter(), cancel=cancel, owner=worker_id)


def _max_ranks(device: str, devices: int, device_class: str) -> int:
    """The most ranks a worker owning ``devices`` GPUs from ``device`` on (or the CPU) runs;
    a :class:`ConfigError` when those GPUs are missing or not all of ``device_class``."""
    if devices < 1:
        raise ConfigError(f"--devices {devices}: a worker owns one device at least; give 1 or more")
    owned = rank_devices(device, devices)
    if owned == ["cpu"]:
        return len(os.sched_getaffinity(0))
    for gpu in owned:
        other = device_identity(gpu).device_class
        if other != device_class:
            raise ConfigError(
                f"--devices {devices}: {gpu} is a {other!r}, not a {device_class!r} like "
                f"{owned[0]}; a worker's GPUs must be of one class, so start one worker per class"
            )
    return devices


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    """Claims and runs jobs until :meth:`stop` is called.

    Args:
        db: the database the jobs are in.
        policy: when a running job counts as abandoned and may be taken over.
        heartbeat_interval_s: how often the lease is refreshed and cancel polled; keep it
            well under ``policy.stale_after_s``.
        poll_interval_s: how long to wait before looking again when the queue is empty.
        device: the device this worker owns; a job asking for ``auto`` runs on it, and only
            jobs for its device class (or none yet) are claimed.
        devices: the GPUs this worker owns from ``device`` on, all of its class: it claims
            jobs of up to that many ranks (``nproc_per_node``). A CPU worker claims jobs of
            up to its cores in ranks, which share the host.
        run_job: runs one claimed job (the tuner's ``run_job`` by default).
        workloads_dir: the directory of workload files this worker runs, as the server's
            ``--workloads-dir``; a job whose workload is not in this worker's catalog fails.
    """

    def __init__(
        self,
        db: Database,
        policy: ClaimPolicy | None = None,
        heartbeat_interval_s: float = 5.0,
        poll_interval_s: float = 1.0,
        device: str = "auto",
        worker_id: str | None = None,
        devices: int = 1,
        run_job: JobRunner = _tuner_run_job,
        workloads_dir: Path | None = None,
    ) -> None:
        self.db = db
        self.policy = policy or ClaimPolicy()
        if heartbeat_interval_s * 2 > self.policy.stale_after_s:
            raise ValueError("the heartbeat interval must be at most half the stale timeout")
        self.heartbeat_interval_s = heartbeat_interval_s
        self.poll_interval_s = poll_interval_s
        self.device = device
        self.device_class = device_identity(device).device_class
        #: The most ranks of a job this worker runs: one per GPU it owns, one per core on a CPU.
        self.max_ranks = _max_ranks(device, devices, self.device_class)
        self.worker_id = worker_id or default_worker_id()
        self._run_job = run_job
        self.workloads_dir = workloads_dir
        # Trials run the user's code: they must not see the database's password.
        withhold_from_trials(db.engine.url.password)
        self._stopping = threading.Event()
        self._announced_at: float | None = None

    def stop(self) -> None:
        """Stop claiming; a running job is stopped and put back in the queue to resume."""
        self._stopping.set()

    def run(self) -> None:
        """Claim and run jobs until stopped; database hiccups are logged and retried."""
        log.info(
            "worker %s started on %s, device %s (%s)",
            self.worker_id,
            self.db.shown_url,
            self.device,
            self.device_class,
        )
        if self.workloads_dir is not None and not self.workloads_dir.is_dir():
            log.warning(
                "worker %s: the workloads directory %s does not exist; jobs naming its "
                "workloads will fail until it does",
                self.worker_id,
                self.workloads_dir,
            )
        while not self._stopping.is_set():
            try:
                self._announce()
                ran = self.run_once()
            except SQLAlchemyError as exc:
                log.warning("worker %s: database error, retrying: %s", self.worker_id, exc)
                ran = False
            if not ran:
                self._stopping.wait(self.poll_interval_s)
        self._retire()
        log.info("worker %s stopped", self.worker_id)

    def _announce(self, every_s: float | None = None) -> None:
        """Tell the database this worker and its device class are alive, at most once per
        heartbeat interval (``GET /v1/devices`` lists the classes of live workers)."""
        every_s = self.heartbeat_interval_s if every_s is None else every_s
        if self._announced_at is not None and time.monotonic() - self._announced_at < every_s:
            return
        with self.db.session(immediate=True) as session:
            announce(session, self.worker_id, self.device_class)
        self._announced_at = time.monotonic()

    def _retire(self) -> None:
        try:
            with self.db.session(immediate=True) as session:
                retire(session, self.worker_id)
        except SQLAlchemyError as exc:  # it is forgotten once it stops announcing anyway
            log.warning("worker %s could not sign off: %s", self.worker_id, exc)

    def run_once(self) -> int | None:
        """Claim one job and run it to its end; the id of the job, or None if none was queued."""
        with self.db.session(immediate=True) as session:
            job = claim_next(
                session,
                self.worker_id,
                self.policy,
                device_class=self.device_class,
                max_ranks=self.max_ranks,
            )
            if job is None:
                return None
            job_id, attempt = job.id, job.attempts
            refusal = self._refusal(job_id, job.options.get("workload"))
            if refusal is not None:
                fail(session, job_id, self.worker_id, refusal)
                log.warning("worker %s refused job %d: %s", self.worker_id, job_id, refusal)
                return job_id
            if self.device != "auto" and job.options.get("device", "auto") == "auto":
                job.options = {**job.options, "device": self.device}
        log.info("worker %s claimed job %d (attempt %d)", self.worker_id, job_id, attempt)
        cancel = threading.Event()
        lease = _Lease(self, job_id, cancel)
        lease.start()
        try:
            self._run_job(self.db, job_id, cancel=cancel, worker_id=self.worker_id)
        except LeaseLostError as exc:
            log.warning("worker %s: %s", self.worker_id, exc)
        except DATABASE_FAULTS as exc:  # a transient fault, not the job's: requeue it
            log.warning(
                "worker %s: the database failed during job %d (%s); putting it back in "
                "the queue once it answers",
                self.worker_id,
                job_id,
                exc,
            )
            self._requeue_when_reachable(lease)
        except AutotuneError as exc:  # usually stored on the job by run_job already
            self._fail(job_id, str(exc))
        except Exception as exc:  # a bug must fail the job, not take the worker down with it
            log.exception("worker %s: job %d raised", self.worker_id, job_id)
            self._fail(
                job_id,
                f"job {job_id} hit an internal error ({type(exc).__name__}: "
                f"{exc}); report it with the worker log",
            )
        finally:
            lease.finish()
        if lease.shutdown and not lease.released:  # the lease could not reach the database
            lease.release()
        log.info("worker %s finished job %d", self.worker_id, job_id)
        return job_id

    def _refusal(self, job_id: int, ref: object) -> str | None:
        """Why this worker will not run a job whose stored workload is ``ref``, or None.

        The catalog is read anew for each job, as the API reads it for each request, so a file
        added to the workloads directory is runnable without a restart.
        """
        catalog = WorkloadCatalog(self.workloads_dir)
        if isinstance(ref, str) and catalog.entry_of_ref(ref) is not None:
            return None
        return (
            f"job {job_id}'s workload {str(ref)[:200]!r} is not in this worker's catalog, so it "
            "was not run; submit a name that GET /v1/workloads lists, to a server whose workers "
            "have the same --workloads-dir"
        )

    def _requeue_when_reachable(self, lease: _Lease) -> None:
        """Release the job as soon as the database answers again (or another worker took it
        over after its lease ran out, which release sees and leaves alone)."""
        while not self._stopping.is_set():
            lease.release()
            if lease.reached_database:
                return
            self._stopping.wait(self.poll_interval_s)

    def _fail(self, job_id: int, error: str) -> None:
        with self.db.session(immediate=True) as session:
            fail(session, job_id, self.worker_id, error)


class _Lease(threading.Thread):
    """Heartbeats one job and sets ``cancel`` when it must stop: cancel, lost lease, shutdown."""

    def __init__(self, worker: Worker, job_id: int, cancel: threading.Event) -> None:
        super().__init__(name=f"heartbeat-job-{job_id}", daemon=True)
        self.worker, self.job_id, self.cancel = worker, job_id, cancel
        self.shutdown = False
        self.released = False
        self.reached_database = False
        self._done = threading.Event()

    def run(self) -> None:
        next_beat = time.monotonic() + self.worker.heartbeat_interval_s
        while not self._done.wait(0.2):
            if self.worker._stopping.is_set() and not self.cancel.is_set():
                # Requeued before the trial is stopped, so that the job never passes through
                # a finished state: whatever the stopping run writes after is refused.
                self.shutdown = True
                self.release()
                self.cancel.set()
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + self.worker.heartbeat_interval_s
                self._beat()

    def _beat(self) -> None:
        try:
            with self.worker.db.session() as session:
                state = heartbeat(session, self.job_id, self.worker.worker_id)
            self.worker._announce(every_s=0)  # busy, but alive: its device class stays listed
        except SQLAlchemyError as exc:  # the next beat may get through before the lease expires
            log.warning("heartbeat of job %d failed: %s", self.job_id, exc)
            return
        if state is None and not self.cancel.is_set():
            log.warning(
                "job %d is no longer owned by %s; stopping its trial",
                self.job_id,
                self.worker.worker_id,
            )
            self.cancel.set()
        elif state and not self.cancel.is_set():
            log.info("job %d: cancel requested", self.job_id)
            self.cancel.set()

    def release(self) -> None:
        try:
            with self.worker.db.session(immediate=True) as session:
                self.released = release(session, self.job_id, self.worker.worker_id)
        except SQLAlchemyError as exc:
            log.warning("could not put job %d back in the queue: %s", self.job_id, exc)
            return
        self.reached_database = True
        if self.released:
            log.info("worker %s put job %d back in the queue", self.worker.worker_id, self.job_id)

    def finish(self) -> None:
        self._done.set()
        self.join()
