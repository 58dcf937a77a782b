"""The profile as the job's ranks: rank 0 measures, every other rank runs the same in lockstep.

In a job of ``--nproc-per-node N`` the profile process is N ranks, as a trial is (see
:mod:`autotune.runner._ranks`). Rank 0 runs the profile and records; while a
:func:`lockstep` block is open, every :class:`~autotune.measure.profiling._bench.StepBench`
it builds wraps its model in ``DistributedDataParallel`` and every loader it times is one of
N: each step it takes and each loader it starts is first announced to the other ranks (a
small broadcast on a gloo group of their own, as a trial's loop broadcasts rank 0's decision
each step), which take the same step on a batch of the same size, so that the gradients'
all-reduce is in every timed step, or pull batches from the same loader on their shard until
rank 0's timing ends, so that N loaders compete for the host as in the trials. The other
ranks' loop is :func:`autotune.measure.profiling._follow.follow`.

The step sweep, its thread counts, the optimizer probe and the loader sweep with its
follow-ups run so; the fresh heap, the fork and accumulation probes (ratios and seconds of
one process's own) and the compile probe run on rank 0 alone, the others waiting.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from datetime import timedelta
from typing import Any, get_args

import torch
import torch.distributed as dist

from autotune.measure._distributed import is_distributed
from autotune.space import AmpMode, CompileMode, OptimizerImpl

#: Commands rank 0 sends: stop following; build a bench; step one; time a loader; end the
#: block (drop every bench and loader, then meet at a barrier).
END, BENCH, STEP, LOADER, IDLE = range(5)
#: Slots of one command: its code, then its arguments (unused ones zero), then the ids of
#: benches rank 0 let go of since the last command (-1 where none).
ARGS = 6
DROPS = 3
WIDTH = 1 + ARGS + DROPS
#: Choices a command names by index (the bench's precision, compile mode, optimizer).
AMP_MODES: tuple[AmpMode, ...] = get_args(AmpMode)
COMPILE_MODES: tuple[CompileMode, ...] = get_args(CompileMode)
OPTIMIZER_IMPLS: tuple[OptimizerImpl, ...] = get_args(OptimizerImpl)
#: The longest rank 0 may run alone (the compile probe, the fork probe) while the others wait.
WAIT = timedelta(hours=6)


class Conductor:
    """Rank 0's side: announces each bench, step and loader to the other ranks."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.open = False
        self._next_id = 0
        self._dropped: list[int] = []

    def send(self, code: int, *args: int) -> None:
        drops = self._dropped[:DROPS]
        del self._dropped[:DROPS]
        values = [code, *args, *[0] * (ARGS - len(args)), *drops, *[-1] * (DROPS - len(drops))]
        dist.broadcast(torch.tensor(values, dtype=torch.int64), 0, group=self.group)

    def bench(self, bench: object, *args: int) -> int:
        """Announce a new bench (its model then wrapped in DDP on every rank); its id."""
        self._next_id += 1
        ident = self._next_id
        self.send(BENCH, ident, *args)
        # Let go of rank 0's: the others drop theirs with the next command.
        weakref.finalize(bench, self._dropped.append, ident)
        return ident

    def settle(self) -> None:
        """End what the others run (a loader, the block's benches), and wait for them."""
        self.send(IDLE)
        dist.barrier(group=self.group)


_conductor: Conductor | None = None
#: In rank 0: the other ranks' pids (its children, whose trees are theirs, not its own).
_other_ranks: frozenset[int] = frozenset()
#: True in a rank following rank 0 (its benches are wrapped in DDP too).
_following = False


def conductor() -> Conductor | None:
    """Rank 0's conductor inside a :func:`lockstep` block; None elsewhere (and one rank)."""
    return _conductor if _conductor is not None and _conductor.open else None


def in_lockstep() -> bool:
    """Whether a bench built now runs on every rank (its model wrapped in DDP)."""
    return conductor() is not None or _following


def other_ranks() -> frozenset[int]:
    """The other ranks' pids, in rank 0 (empty elsewhere)."""
    return _other_ranks


def set_following() -> None:
    global _following
    _following = True


def control_group() -> Any:
    """The gloo group the commands travel on (on CUDA too: waiting on it holds no GPU)."""
    return dist.new_group(backend="gloo", timeout=WAIT)


def start_conducting(others: frozenset[int]) -> None:
    """On rank 0 of several (the ``others`` its forked children): make the conductor
    (collective: every rank makes the group)."""
    global _conductor, _other_ranks
    if is_distributed() and dist.get_world_size() > 1:
        _conductor = Conductor(control_group())
        _other_ranks = others


@contextlib.contextmanager
def lockstep() -> Iterator[None]:
    """Every rank runs what rank 0 runs in the block (a no-op with one rank)."""
    if _conductor is None:
        yield
        return
    _conductor.open = True
    try:
        yield
    except BaseException:
        # The others may wait in a collective rank 0 left: the parent ends every rank.
        _conductor.open = False
        raise
    _conductor.open = False
    _conductor.settle()


def stop_conducting() -> None:
    """Release the other ranks (they exit); rank 0 goes on alone."""
    global _conductor
    if _conductor is not None:
        _conductor.send(END)
        _conductor = None
