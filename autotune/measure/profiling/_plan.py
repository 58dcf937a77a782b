"""What a profile measures and within which budgets: the plan the parent process sends.

:class:`ProfilePlan` carries the space's values (batch sizes, precisions, layouts, worker
counts, thread counts) and the time and memory budgets every part of the profile keeps to; the
constants here are its defaults and the memory margin each part stops at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.space import AmpMode, OptimizerImpl

#: Seconds for the whole step sweep: enough for the grid's batches in one or two precisions on
#: a small CPU, and a point left out is extrapolated (its predictions flagged as uncertain)
#: rather than making every job wait.
STEP_BUDGET_S = 20.0
#: Seconds for the whole loader sweep: each worker count pays its workers' start-up, a warm-up
#: and a timed window.
LOADER_BUDGET_S = 20.0
#: Share of the memory budget a step point or a loader timing may be predicted to need before
#: the profile stops short of it: the prediction is a fit, and passing the budget kills the trial.
MEMORY_MARGIN = 0.9
#: Seconds the profile's process is allowed per compile mode beyond its compile allowance: the
#: compiled and eager windows, building the models, and leaving an abandoned compile.
COMPILE_OVERHEAD_S = 15.0
#: Seconds the profile's process is allowed per optimizer implementation: building the model
#: again and its windows beside the default's (a step of the workload's batch each, at least).
OPTIMIZER_OVERHEAD_S = 10.0


@dataclass(frozen=True)
class ProfilePlan:
    """What to profile: the space's values and the budgets, as the parent sends them."""

    batch_sizes: Sequence[int]
    amp_modes: Sequence[AmpMode]
    channels_last: Sequence[bool]
    worker_counts: Sequence[int]
    loader_batch_size: int
    memory_budget_bytes: int | None = None
    #: Try worker counts beyond the grid (off when the user fixed or narrowed num_workers).
    extend_workers: bool = True
    step_budget_s: float = STEP_BUDGET_S
    loader_budget_s: float = LOADER_BUDGET_S
    #: Run with glibc keeping freed host memory (when the space holds that setting): the step
    #: sweep's one long-lived process then sees the heap a trial with it sees.
    retain_freed_memory: bool = False
    #: The space holds glibc's default handling of freed memory: on a CPU with glibc, time the
    #: step once in a fresh heap with it, then once retaining freed memory, and keep retaining
    #: (see :func:`~autotune.measure.profiling._host.profile_fresh_heap`).
    fresh_heap: bool = False
    #: Intra-op thread counts the space searches besides PyTorch's default (CPU only).
    intra_op_threads: Sequence[int] = ()
    #: The space holds workers started anew each epoch (``persistent_workers`` off) and
    #: retained freed memory: on a CPU, time what a fork costs the next step (see
    #: :func:`~autotune.measure.profiling._host.profile_fork_copy`).
    fork_copy: bool = False
    #: The space holds configurations that accumulate gradients over micro-batches (a batch
    #: under the baseline's effective batch that divides it): time what that saves and costs
    #: a step (see :func:`~autotune.measure.profiling._accumulation.profile_accumulation`).
    accumulation: bool = False
    #: The ``torch.compile`` modes the space searches (``off`` left out): each is timed once,
    #: last, at :attr:`loader_batch_size` (see
    #: :func:`~autotune.measure.profiling._compile.profile_compile`).
    compile_modes: Sequence[str] = ()
    #: Seconds one of those compiles may take: the share of the job's time one compile may
    #: spend (the profile lowers it further to what the run can repay).
    compile_budget_s: float = 0.0
    #: Samples in the user's run, which a compile must repay; None where unknown.
    run_samples: int | None = None
    #: The optimizer implementations the space searches besides ``default``: each is timed
    #: once at :attr:`loader_batch_size` against the default (see
    #: :func:`~autotune.measure.profiling._optimizer.profile_optimizer`).
    optimizer_impls: Sequence[OptimizerImpl] = ()

    def timeout_s(self) -> float:
        """Seconds the profile measures for at most: its budgets, each compile mode's
        allowance with what timing it adds, and each optimizer implementation's timing."""
        compiles = sum(m != "off" for m in self.compile_modes) if self.compile_budget_s else 0
        return (
            self.step_budget_s
            + self.loader_budget_s
            + compiles * (self.compile_budget_s + COMPILE_OVERHEAD_S)
            + len(self.optimizer_impls) * OPTIMIZER_OVERHEAD_S
        )
