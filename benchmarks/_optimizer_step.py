"""The optimizer's step alone, per implementation, in one fresh process (for
``benchmarks.optimizer_impl``).

Reads one JSON request on stdin (``workload``: a reference, ``impls``, ``steps`` a round,
``rounds``) and answers one JSON line: per implementation, the median milliseconds of one
``optimizer.step()`` in each round. The workload's model takes one forward and backward pass
on its first batch (at its own batch size, on the CPU); each implementation's optimizer, built
by the workload over those parameters and rebuilt with the flag, then steps on those
gradients, the implementations interleaved round by round with the order rotated.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import torch

from autotune.measure import build_loader, with_implementation
from autotune.measure._step import forward_loss
from autotune.space import Config
from autotune.workload import load_workload

WARMUP_STEPS = 5


def measure(request: dict[str, Any]) -> dict[str, Any]:
    torch.manual_seed(0)
    workload = load_workload(request["workload"])
    model = workload.model()
    model.train()
    config = Config(batch_size=workload.batch_size)
    batch = next(iter(build_loader(workload, config, workload.dataset())))
    forward_loss(workload, model, batch).backward()
    impls: list[str] = request["impls"]
    optimizers = {
        impl: with_implementation(workload.optimizer(model.parameters()), impl) for impl in impls
    }
    for optimizer in optimizers.values():
        for _ in range(WARMUP_STEPS):
            optimizer.step()
    ms: dict[str, list[float]] = {impl: [] for impl in impls}
    for index in range(request["rounds"]):
        shift = index % len(impls)
        for impl in impls[shift:] + impls[:shift]:
            times = []
            for _ in range(request["steps"]):
                started = time.perf_counter()
                optimizers[impl].step()
                times.append(time.perf_counter() - started)
            ms[impl].append(1000 * statistics.median(times))
    return {"outcome": "ok", "ms": ms}


def main() -> None:
    print(json.dumps(measure(json.loads(sys.stdin.read()))), flush=True)


if __name__ == "__main__":
    main()
