"""The job's profile: what to measure (from the space), measuring it once in a fresh process
under the device lock, and reusing the one a resumed job stored."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from autotune.measure import ProfilePlan
from autotune.predict import Profile, predict_space, ranking
from autotune.runner import ProfileFailed, TrialCancelled, probe_workload, profile_workload
from autotune.space import Config, SearchSpace
from autotune.store import Database, Job, device_locks, lock_owned_job


class ProfileCancelled(Exception):
    """The job was cancelled while its profile was measured."""


def profile_plan(
    space: SearchSpace,
    memory_budget_bytes: int | None,
    host_budget: bool,
    seconds: float,
    compile_budget_s: float = 0.0,
    run_samples: int | None = None,
) -> ProfilePlan:
    """What to profile: the space's batches, precisions, layouts, worker counts, step thread
    counts and optimizer implementations, and its compile modes where one compile may take
    ``compile_budget_s`` (none with 0) against a run of ``run_samples``."""
    choices = space.choices
    batches = choices["batch_size"]
    loader_batch = min(space.baseline().batch_size, max(batches))
    effective = space.baseline().effective_batch
    return ProfilePlan(
        batch_sizes=list(batches),
        amp_modes=list(choices["amp"]),
        channels_last=list(choices["channels_last"]),
        worker_counts=list(choices["num_workers"]),
        loader_batch_size=loader_batch,
        memory_budget_bytes=memory_budget_bytes if host_budget else None,
        # A count beyond the grid could never be tried where the user ranged num_workers.
        extend_workers=space.takes_extra_workers and len(choices["num_workers"]) > 1,
        step_budget_s=seconds / 2,
        loader_budget_s=seconds / 2,
        retain_freed_memory=True in choices["retain_freed_memory"],
        fresh_heap=False in choices["retain_freed_memory"],
        intra_op_threads=[t for t in choices["intra_op_threads"] if t is not None],
        fork_copy=(
            max(choices["num_workers"]) > 0
            and False in choices["persistent_workers"]
            and True in choices["retain_freed_memory"]
        ),
        accumulation=any(batch < effective and effective % batch == 0 for batch in batches),
        compile_modes=[m for m in choices["compile"] if m != "off"] if compile_budget_s else [],
        compile_budget_s=compile_budget_s,
        run_samples=run_samples,
        optimizer_impls=[i for i in choices["optimizer_impl"] if i != "default"],
    )


def stored_profile(job: Job) -> Profile | str | None:
    """The job's stored profile; the reason profiling failed; None when none was measured."""
    if not job.profile:
        return None
    if "error" in job.profile:
        return str(job.profile["error"])
    return Profile.model_validate(job.profile)


def measure_profile(
    db: Database,
    job_id: int,
    owner: str | None,
    lock_keys: Sequence[str],
    workload: str,
    device: str,
    plan: ProfilePlan,
    timeout_s: float,
    memory_budget_bytes: int | None,
    host_budget: bool,
    cancel: threading.Event,
) -> Profile | str:
    """Profile in a fresh process (as many ranks as the job's trials) under the locks of
    every device its ranks use, and store the result on the job.

    Returns the profile, or the reason it could not be measured (the job then searches without
    one). Raises :class:`ProfileCancelled` when the job is cancelled meanwhile.
    """
    result: Profile | str
    with device_locks(db, lock_keys, cancel) as held:
        if not held:
            raise ProfileCancelled
        try:
            result = profile_workload(
                workload,
                device,
                plan,
                timeout_s + plan.timeout_s(),
                memory_budget_bytes=memory_budget_bytes,
                budget_is_host_memory=host_budget,
                cancel=cancel,
            )
        except TrialCancelled:
            raise ProfileCancelled from None
        except ProfileFailed as exc:
            result = str(exc)
    with db.session(immediate=True) as session:
        job = lock_owned_job(session, job_id, owner)
        job.profile = (
            {"error": result} if isinstance(result, str) else result.model_dump(mode="json")
        )
    return result


def predicted_ranking(
    workload: str,
    device: str = "cpu",
    seconds: float = 40.0,
    memory_budget_bytes: int | None = None,
    timeout_s: float = 300.0,
) -> tuple[Profile, list[tuple[Config, float]]]:
    """Probe and profile ``workload`` in fresh processes, then rank every configuration of its
    default space by predicted samples/s (fastest first, those over the budget left out).

    For benchmarks: how good the profile's ranking is, without running a search.
    """
    probe = probe_workload(workload, device, timeout_s)
    space = SearchSpace(probe.device, probe.workload)
    host_budget = not probe.device.is_cuda
    plan = profile_plan(space, memory_budget_bytes, host_budget, seconds)
    profile = profile_workload(
        workload,
        device,
        plan,
        timeout_s + seconds,
        memory_budget_bytes=memory_budget_bytes,
        budget_is_host_memory=host_budget,
    )
    if profile.extra_workers:
        space = SearchSpace(probe.device, probe.workload, extra_workers=profile.extra_workers)
    return profile, ranking(predict_space(profile, space, memory_budget_bytes), space)
