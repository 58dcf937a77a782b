"""What Lightning's and Accelerate's batch-size finders pick, run through the libraries themselves.

Run as ``python -m benchmarks._finders`` with a JSON request on stdin; prints one JSON line.
Each finder runs in a fresh process, as a user would run it before training.

The finders are given the same limits as the tuner: the largest batch size of the reduced
space, and the memory budget. On a CPU nothing raises an out-of-memory error before the host runs
out, so the budget is enforced by raising the error text of PyTorch's CPU allocator
("DefaultCPUAllocator: can't allocate memory") once the process tree's memory passes it: that
is the error both libraries recognise as CPU out-of-memory. On CUDA the process is held to the
budget as the tuner's trials are (``torch.cuda.set_per_process_memory_fraction``), so passing it
is a real CUDA out-of-memory error.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import warnings
from typing import Any

import torch
from torch.utils.data import DataLoader

from autotune.measure import tree_memory_bytes
from autotune.workload import Workload, load_workload

#: Training steps each finder runs per batch size it tries (Lightning's default).
STEPS_PER_TRY = 3


def cap_device_memory(device: torch.device, budget_bytes: int) -> None:
    """On CUDA, hold this process to the budget: CUDA's allocator fails past it."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, budget_bytes / total), device)


def check_budget(device: torch.device, budget_bytes: int) -> None:
    """On a CPU, fail as PyTorch's CPU allocator does once the process tree is over the budget
    (on CUDA the allocator does, see :func:`cap_device_memory`)."""
    if device.type != "cpu":
        return
    used = tree_memory_bytes(os.getpid())
    if used > budget_bytes:
        raise RuntimeError(
            f"DefaultCPUAllocator: can't allocate memory: the process tree holds "
            f"{used / 2**20:.0f} MiB, over the benchmark's budget of {budget_bytes / 2**20:.0f} MiB"
        )


def lightning_finder(
    workload: Workload, device: torch.device, max_batch: int, budget_bytes: int
) -> dict[str, Any]:
    """Lightning's ``Tuner.scale_batch_size`` (mode "power") and its ``num_workers`` rule; on
    CUDA, Lightning's ``accelerator="gpu"`` on that one GPU."""
    import lightning as L
    from lightning.fabric.utilities.data import suggested_max_num_workers
    from lightning.pytorch.tuner.tuning import Tuner

    class Wrapped(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = workload.model()
            self.batch_size = workload.batch_size

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            inputs, target = batch
            assert workload.loss is not None, "the finders run the built-ins, which have a loss"
            return workload.loss(self.net(inputs), target)

        def on_train_batch_end(self, *args: Any) -> None:
            check_budget(device, budget_bytes)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return workload.optimizer(self.net.parameters())

        def train_dataloader(self) -> DataLoader[Any]:
            return DataLoader(
                workload.dataset(),
                batch_size=self.batch_size,
                shuffle=True,
                drop_last=True,
                collate_fn=workload.collate_fn,
            )

    with tempfile.TemporaryDirectory() as root, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        on_gpu = device.type == "cuda"
        trainer = L.Trainer(
            accelerator="gpu" if on_gpu else "cpu",
            devices=[device.index or 0] if on_gpu else 1,
            max_epochs=1,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=root,
        )
        found = Tuner(trainer).scale_batch_size(
            Wrapped(),
            mode="power",
            init_val=workload.batch_size,
            max_val=max_batch,
            steps_per_trial=STEPS_PER_TRY,
        )
    return {"batch_size": found, "num_workers": suggested_max_num_workers(1)}


def accelerate_finder(
    workload: Workload, device: torch.device, max_batch: int, budget_bytes: int
) -> dict[str, Any]:
    """Accelerate's ``find_executable_batch_size``, starting from the largest batch allowed,
    training on ``device`` as a user's loop would."""
    from accelerate.utils import find_executable_batch_size

    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=max_batch)  # type: ignore[untyped-decorator]
    def train(batch_size: int) -> int:
        tried.append(batch_size)
        model = workload.model().to(device)
        model.train()
        optimizer = workload.optimizer(model.parameters())
        loader = DataLoader(
            workload.dataset(),
            batch_size=batch_size,
            shuffle=True,
            drop_last=True,
            collate_fn=workload.collate_fn,
        )
        loss_fn = workload.loss
        assert loss_fn is not None, "the finders run the built-ins, which have a loss"
        for _, (inputs, target) in zip(range(STEPS_PER_TRY), loader, strict=False):
            loss_fn(model(inputs.to(device)), target.to(device)).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            check_budget(device, budget_bytes)
        return batch_size

    return {"batch_size": train(), "tried": tried}


def main() -> None:
    request = json.loads(sys.stdin.read())
    finder = {"lightning": lightning_finder, "accelerate": accelerate_finder}[request["finder"]]
    device = torch.device(request.get("device", "cpu"))
    started = time.monotonic()
    try:
        cap_device_memory(device, request["budget_bytes"])
        answer = finder(
            load_workload(request["workload"]),
            device,
            request["max_batch"],
            request["budget_bytes"],
        )
        answer["outcome"] = "ok"
    except ImportError as exc:
        answer = {
            "outcome": "missing",
            "error": f"{exc.name} is not installed; "
            "install the benchmark extra: pip install -e '.[bench]'",
        }
    except RuntimeError as exc:  # e.g. no batch size fits the budget at all
        answer = {"outcome": "error", "error": str(exc).splitlines()[0]}
    answer["wall_s"] = time.monotonic() - started
    print(json.dumps(answer), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
