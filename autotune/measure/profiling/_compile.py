"""The compile probe: ``torch.compile`` in each mode the space searches, timed once, last.

Before any compiled configuration is seeded or proposed, the profile compiles the model once
per mode at a small batch (the workload's own), with inductor's caches empty as a trial's are,
and times the compiled step against the eager step beside it (windows taken in turn, each
keeping its faster, as the step sweep does). A compile costs about the same seconds at any
batch, so one timing prices every compiled configuration of its mode
(:class:`~autotune.predict.CompilePoint`).

A compile is held to the plan's allowance, lowered to the seconds the whole run takes eagerly
at the fastest step the sweep measured (a compile longer than that cannot be repaid however
fast the compiled step): past it, the compile is abandoned and recorded as over budget, with
the allowance as a lower bound of its seconds.
"""

from __future__ import annotations

import contextlib
import signal
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from autotune.measure._compile import MAX_COMPILING_STEPS, compilations, fresh_compile_caches
from autotune.measure._distributed import world_size
from autotune.measure.profiling._bench import StepBench, timed_steps
from autotune.measure.profiling._plan import ProfilePlan
from autotune.predict import CompilePoint, StepPoint
from autotune.space import CompileMode
from autotune.workload import Workload

#: Seconds of each timed window of the compiled and the eager step.
COMPILE_WINDOW_S = 0.3
#: Windows of each, taken in turn; each keeps its faster (interference only slows a step).
COMPILE_WINDOWS = 2
#: Batches cycled through in the windows.
COMPILE_BATCHES = 2


class _OverBudget(Exception):
    """The compile outlasted its allowance."""


class _Deadline:
    """Whether the deadline of :func:`_deadline` has passed."""

    passed = False


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[_Deadline]:
    """Raise :class:`_OverBudget` in this thread once ``seconds`` have passed (the main thread
    of a POSIX process only; elsewhere the profile's own timeout is the bound). The state it
    yields says whether they have: torch may wrap the exception raised inside a compile in
    one of its own."""
    state = _Deadline()
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "setitimer"
    ):
        yield state
        return

    def over(_signum: int, _frame: object) -> None:
        state.passed = True
        raise _OverBudget

    previous = signal.signal(signal.SIGALRM, over)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    try:
        yield state
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def compile_allowance(plan: ProfilePlan, step: Sequence[StepPoint]) -> float:
    """Seconds one compile may take: the plan's allowance, at most the run's seconds at the
    fastest eager step measured (``run_samples`` / its samples/s), which no compile longer
    than can repay. The run's samples are every rank's, the step's rate one rank's: the run
    lasts its samples over the rate times the ranks."""
    fastest = max((p.samples_per_s or 0.0 for p in step), default=0.0) * world_size()
    if plan.run_samples and fastest > 0:
        return min(plan.compile_budget_s, plan.run_samples / fastest)
    return plan.compile_budget_s


def compile_batches(plan: ProfilePlan, make: Any) -> list[Any]:
    """The host batches the probe steps on (``make(batch_size, offset)``), none where the
    plan times no compile."""
    if not plan.compile_modes or plan.compile_budget_s <= 0:
        return []
    size = plan.loader_batch_size
    return [make(size, i * size) for i in range(COMPILE_BATCHES)]


def profile_compile(
    workload: Workload,
    device: torch.device,
    batches: list[Any],
    plan: ProfilePlan,
    step: Sequence[StepPoint],
) -> list[CompilePoint]:
    """One :class:`CompilePoint` per mode of the plan, in order, in its first precision and
    layout; after a compile over its allowance the rest are not timed (the search then
    measures them, each under its own allowance)."""
    if not batches:
        return []
    amp, channels_last = plan.amp_modes[0], plan.channels_last[0]
    budget_s = compile_allowance(plan, step)
    eager = StepBench(workload, device, amp, channels_last)
    eager_batches = [eager.on_device(b) for b in batches]
    eager.step(eager_batches[0])
    points = []
    for mode in plan.compile_modes:
        if mode == "off":
            continue
        point = _time_mode(
            workload,
            device,
            mode,
            eager,
            (eager_batches, batches),
            plan.loader_batch_size,
            budget_s,
        )
        points.append(point)
        if point.over_budget:
            break
    return points


def _time_mode(
    workload: Workload,
    device: torch.device,
    mode: str,
    eager: StepBench,
    batches: tuple[list[Any], list[Any]],
    batch_size: int,
    budget_s: float,
) -> CompilePoint:
    """Compile in ``mode`` with empty caches, within ``budget_s``, then time its step against
    the eager one's; ``batches`` are the eager bench's on the device and the host batches."""
    eager_batches, host_batches = batches
    base: dict[str, Any] = {
        "mode": mode,
        "batch_size": batch_size,
        "amp": eager.training.config.amp,
        "channels_last": eager.channels_last,
        "budget_s": budget_s,
    }
    started = time.perf_counter()
    deadline = _Deadline()
    with fresh_compile_caches():
        try:
            compiled_mode: CompileMode = mode  # type: ignore[assignment]
            bench = StepBench(workload, device, base["amp"], eager.channels_last, compiled_mode)
            on_device = [bench.on_device(b) for b in host_batches]
            steps = 0
            with _deadline(budget_s) as deadline:
                while steps < MAX_COMPILING_STEPS:
                    before = compilations()
                    bench.step(on_device[steps % len(on_device)])
                    bench.synchronize()
                    steps += 1
                    if compilations() == before:
                        break
            compile_wall = time.perf_counter() - started
            if deadline.passed:  # torch caught the deadline's exception and stepped on
                raise _OverBudget
        except Exception as exc:
            _reset_compiler()
            if isinstance(exc, _OverBudget) or deadline.passed:
                return CompilePoint(**base, compile_s=budget_s, over_budget=True)
            # A mode the model does not compile in: the trial says more.
            return CompilePoint(
                **base,
                compile_s=time.perf_counter() - started,
                error=f"{type(exc).__name__}: {exc}"[:300],
            )
        compiled_rate = eager_rate = 0.0
        for _ in range(COMPILE_WINDOWS):
            eager_rate = max(eager_rate, _rate(eager, eager_batches, batch_size))
            compiled_rate = max(compiled_rate, _rate(bench, on_device, batch_size))
    _reset_compiler()
    return CompilePoint(
        **base,
        compile_s=max(0.0, compile_wall - steps * batch_size / compiled_rate),
        samples_per_s=compiled_rate,
        eager_samples_per_s=eager_rate,
    )


def _rate(bench: StepBench, batches: list[Any], batch_size: int) -> float:
    """Samples/s of the median step over a :data:`COMPILE_WINDOW_S` window."""
    times, _ = timed_steps(bench, batches, COMPILE_WINDOW_S)
    return batch_size / statistics.median(times)


def _reset_compiler() -> None:
    """Drop dynamo's compiled code and guards, so nothing compiled here outlives the probe."""
    with contextlib.suppress(Exception):
        torch._dynamo.reset()
