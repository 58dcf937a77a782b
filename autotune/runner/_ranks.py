"""Trials as the ranks of a DDP job on this host, and the host's share each rank gets.

``--nproc-per-node N`` runs every trial as N processes started the way ``torchrun`` starts
them: the environment rendezvous (``MASTER_ADDR``/``MASTER_PORT`` on a free loopback port,
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``), one thread per rank unless
``OMP_NUM_THREADS`` says otherwise (torchrun's default too), NCCL with one GPU per rank on CUDA
and gloo on a CPU. The trial process is rank 0; it forks the other ranks before touching any
device, so they start from its imports, in its session: killing the trial's process group ends
every rank and every rank's loader workers, and each rank dies with rank 0 (its parent-death
signal), as rank 0 dies with the worker.

The host is shared among the ranks the user will launch (``--host-share``, by default the
ranks measured): the probe sees one rank's share of the cores (by affinity) and of the memory
(by the cap), so the searched worker counts and the memory cap are one rank's; a trial of N
ranks gets N shares, and so does the profile, which runs as the N ranks (see
:mod:`autotune.measure.profiling._lockstep`) and records one rank's rates.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.errors import ConfigError

#: Environment variables a rank reads, as torchrun sets them.
RANK_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")


@dataclass(frozen=True)
class RankPlan:
    """How many ranks a trial runs as, and among how many ranks the host is divided."""

    nproc: int = 1
    #: Ranks sharing the host in the user's launch (at least :attr:`nproc`).
    host_share: int = 1

    def __post_init__(self) -> None:
        if self.nproc < 1 or self.host_share < self.nproc:
            raise ConfigError(
                f"a host share of {self.host_share} cannot hold {self.nproc} ranks; give a "
                "host share of at least the ranks measured"
            )

    @property
    def distributed(self) -> bool:
        return self.nproc > 1

    @property
    def shared(self) -> bool:
        return self.host_share > 1

    def cores(self, allowed: Iterable[int], ranks: int) -> list[int] | None:
        """The cores ``ranks`` ranks' share of the host is pinned to: ``allowed`` divided into
        :attr:`host_share` equal parts (one core each at least); None where that is all."""
        ordered = sorted(allowed)
        per_rank = max(1, len(ordered) // self.host_share)
        chosen = ordered[: min(len(ordered), per_rank * ranks)]
        return None if len(chosen) == len(ordered) else chosen

    def memory_share(self, ranks: int) -> float:
        """The share of the host's memory cap ``ranks`` ranks get."""
        return ranks / self.host_share

    def request_fields(self, mode: str) -> dict[str, Any]:
        """What a trial, probe or profile request says about ranks and the host's share: a
        trial and the profile run as :attr:`nproc` ranks on their share; the probe as one
        rank on one share (it counts the GPUs the ranks need)."""
        ranks = self.nproc if mode in ("trial", "profile") else 1
        fields: dict[str, Any] = {"ranks": ranks}
        if self.shared:
            fields["cores"] = self.cores(os.sched_getaffinity(0), ranks)
        if mode == "probe":
            fields["gpus_wanted"] = self.nproc
        return fields


def check_gpu_count(nproc: int, gpus: int) -> None:
    """Refuse ``--nproc-per-node`` above the GPUs this host shows (one GPU per rank).

    Example:
        >>> check_gpu_count(2, 2)
        >>> try:
        ...     check_gpu_count(4, 2)
        ... except ConfigError as exc:
        ...     print(str(exc)[:56])
        --nproc-per-node 4 needs 4 GPUs (one per rank), but this
    """
    if nproc > gpus:
        raise ConfigError(
            f"--nproc-per-node {nproc} needs {nproc} GPUs (one per rank), but this host shows "
            f"{gpus}; lower --nproc-per-node to {max(1, gpus)} or widen CUDA_VISIBLE_DEVICES"
        )


def restrict_host(cores: Sequence[int] | None, threads: int | None) -> None:
    """Pin this process (and what it starts) to ``cores``, and give torch ``threads`` intra-op
    threads, unless ``OMP_NUM_THREADS`` is set (the user's choice wins, as with torchrun)."""
    if cores:
        os.sched_setaffinity(0, cores)
    if threads is not None and "OMP_NUM_THREADS" not in os.environ:
        import torch

        torch.set_num_threads(threads)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_ranks(world: int, on_rank_start: Callable[[], None]) -> tuple[int, list[int]]:
    """Fork ranks 1..``world``-1 from this process (rank 0) with torchrun's environment;
    returns this process's rank and, in rank 0, the other ranks' pids. ``on_rank_start`` runs
    first thing in each forked rank (its parent-death signal)."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        RANK="0",
        LOCAL_RANK="0",
    )
    pids = []
    for rank in range(1, world):
        pid = os.fork()
        if pid == 0:
            os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank))
            on_rank_start()
            return rank, []
        pids.append(pid)
    return 0, pids


def _exit_reason(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def watch_ranks(
    pids: Sequence[int], world: int, emit: Callable[[dict[str, Any]], None]
) -> threading.Event:
    """In rank 0: report each other rank that ends abnormally (a crash, a signal) as a
    ``rank_failed`` event, the parent then ending every rank; the event returned is set once
    one has (rank 0's own error is then only the echo of that rank's end)."""
    failed = threading.Event()

    def watch(rank: int, pid: int) -> None:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            return
        if status != 0:
            emit(rank_failure(rank, world, "crashed", f"the process {_exit_reason(status)}"))
            failed.set()

    for rank, pid in enumerate(pids, start=1):
        threading.Thread(target=watch, args=(rank, pid), daemon=True).start()
    return failed


def rank_failure(rank: int, world: int, outcome: str, error: str) -> dict[str, Any]:
    """The event a failing rank (or rank 0 for it) sends: its outcome and its reason."""
    return {
        "event": "rank_failed",
        "rank": rank,
        "outcome": outcome,
        "error": f"rank {rank} of {world}: {error}"[:2000],
    }


#: How each rank's metrics combine into the trial's: throughput adds up over the ranks; step
#: times, waits and peak memory are the slowest (or largest) rank's; counts are rank 0's.
_SUMMED = ("samples_per_s",)
_LARGEST = (
    "step_time_median_ms",
    "step_time_p90_ms",
    "data_wait_fraction",
    "copy_wait_fraction",
    "epoch_restart_s",
    "compile_s",
    "peak_memory_allocated_bytes",
    "peak_memory_reserved_bytes",
)


def combine_metrics(per_rank: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The trial's metrics from every rank's: global samples/s, the slowest rank's step time,
    the largest rank's peak device memory (per rank).

    Example:
        >>> combine_metrics([{"samples_per_s": 10.0, "step_time_median_ms": 5.0, "steps": 9},
        ...                  {"samples_per_s": 11.0, "step_time_median_ms": 6.0, "steps": 9}])
        {'samples_per_s': 21.0, 'step_time_median_ms': 6.0, 'steps': 9}
    """
    combined = dict(per_rank[0])
    for key in _SUMMED:
        if all(m.get(key) is not None for m in per_rank):
            combined[key] = sum(m[key] for m in per_rank)
    for key in _LARGEST:
        values = [m[key] for m in per_rank if m.get(key) is not None]
        if values:
            combined[key] = max(values)
    return combined
