"""Workloads that check what their trial process was given, failing on purpose in the model
factory: ``:visible_devices`` reports the GPUs it was shown, ``:sigkill`` is killed by a SIGKILL
it sends itself while using little memory, ``:lineage`` reports its parent and session
(and whether torch._dynamo was imported before it),
``:global_state`` reports torch's global flags (and this module's) as it found them and then
changes them, ``:sleep_forever`` writes its pid to ``$AUTOTUNE_TEST_PID_FILE`` and sleeps,
``:step_threads`` reports the intra-op threads its first forward pass runs on."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.data import TensorDataset

from autotune.workload._contract import Workload


def _report_visible_devices() -> nn.Module:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    raise RuntimeError(f"visible={visible!r} count={torch.cuda.device_count()}")


def _killed() -> nn.Module:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def _lineage() -> nn.Module:
    imported_before = "autotune_test_marker" in sys.modules
    raise RuntimeError(
        f"pid={os.getpid()} ppid={os.getppid()} sid={os.getsid(0)} "
        f"pgid={os.getpgid(0)} marker={imported_before} "
        f"dynamo={'torch._dynamo' in sys.modules}"
    )


#: Calls of :func:`_global_state` this process has seen: a fresh module starts with none.
_CALLS: list[int] = []


def _global_state() -> nn.Module:
    found = (
        f"cudnn.benchmark={torch.backends.cudnn.benchmark} "
        f"threads={torch.get_num_threads()} seed={torch.initial_seed()} "
        f"grad={torch.is_grad_enabled()} calls={len(_CALLS)}"
    )
    _CALLS.append(1)
    torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
    torch.set_num_threads(max(1, torch.get_num_threads() + 1))
    torch.manual_seed(1234)
    torch.set_grad_enabled(False)
    sys.modules["autotune_test_marker"] = sys  # seen by the next :lineage if state leaked
    raise RuntimeError(found)


def _sleep_forever() -> nn.Module:
    with open(os.environ["AUTOTUNE_TEST_PID_FILE"], "w") as out:
        out.write(str(os.getpid()))
    time.sleep(600)
    raise AssertionError("unreachable")


class _ReportThreads(nn.Linear):
    def __init__(self) -> None:
        super().__init__(4, 2)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        raise RuntimeError(f"threads={torch.get_num_threads()}")


def _workload(model: Callable[[], nn.Module], name: str) -> Workload:
    return Workload(
        model=model,
        dataset=lambda: TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))),
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        name=name,
    )


def visible_devices() -> Workload:
    return _workload(_report_visible_devices, "visible-devices")


def sigkill() -> Workload:
    return _workload(_killed, "sigkill")


def lineage() -> Workload:
    return _workload(_lineage, "lineage")


def global_state() -> Workload:
    return _workload(_global_state, "global-state")


def step_threads() -> Workload:
    return _workload(_ReportThreads, "step-threads")


def sleep_forever() -> Workload:
    return _workload(_sleep_forever, "sleep-forever")
