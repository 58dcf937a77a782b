"""What Lightning's ``Trainer.fit`` costs a step beyond the step itself.

The module of benchmarks/workloads/lit_images.py trains over batches held in memory (no loader
work), in fresh modules each run, interleaved for ``--rounds`` rounds: autotune's way (its
``training_step``, backward, the optimizer; the ``self.log`` inside is a no-op without a
Trainer) against ``fit()`` with its defaults and with parts of its per-step work turned off.
Each figure is ms a step over the second epoch, median and range over the rounds. One more arm
drives ``fit()`` one step at a time from outside (:class:`DrivenFit`, ``fit()`` in a greenlet
fed one batch per step): a way for a trial to time Lightning's own step, loop included.

Run it alone on the machine::

    flock -x /tmp/autotune-bench.lock python -m benchmarks.lightning_loop --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import greenlet
import lightning as L
import torch
from torch.utils.data import DataLoader

from benchmarks.workloads.lit_images import Classifier, PhotosData

STEPS = 60  # batches an epoch


class Unlogged(Classifier):
    """The same module without its ``self.log`` call."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> Any:
        images, labels = batch
        return torch.nn.functional.cross_entropy(self(images), labels)


class _Stamps(L.Callback):
    def __init__(self) -> None:
        self.stamps: list[float] = []

    def on_train_batch_start(self, *args: Any) -> None:
        self.stamps.append(time.perf_counter())


def _per_step(stamps: list[float]) -> float:
    second_epoch = stamps[STEPS:]
    return (second_epoch[-1] - second_epoch[0]) / (len(second_epoch) - 1)


def fit(module: L.LightningModule, batches: list[Any], **trainer: Any) -> float:
    class InMemory(L.LightningDataModule):
        def train_dataloader(self) -> DataLoader[Any]:
            return DataLoader(batches, batch_size=None)  # type: ignore[arg-type]

    stamps = _Stamps()
    # The progress bar and model summary print to stdout, which carries the table.
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
        run = L.Trainer(
            max_epochs=2,
            callbacks=[stamps],
            accelerator="cpu",
            devices=1,
            default_root_dir=folder,
            **trainer,
        )
        run.fit(module, InMemory())
    return _per_step(stamps.stamps)


class DrivenFit:
    """``Trainer.fit`` run in a greenlet over an endless feed: :meth:`step` hands it one batch
    and returns once ``fit()`` asks for the next, having done all its per-step work on it."""

    def __init__(self, module: L.LightningModule, folder: str, **trainer: Any) -> None:
        caller = greenlet.getcurrent()

        class Feed(torch.utils.data.IterableDataset[Any]):
            def __iter__(self) -> Any:
                while (batch := caller.switch()) is not None:  # back to the caller: step done
                    yield batch

        run = L.Trainer(max_epochs=1, default_root_dir=folder, **trainer)
        feed = DataLoader(Feed(), batch_size=None)
        self._fit = greenlet.greenlet(lambda: run.fit(module, train_dataloaders=feed))
        self._fit.switch()  # fit()'s set-up, up to its first batch

    def step(self, batch: Any) -> None:
        self._fit.switch(batch)

    def close(self) -> None:
        """End the epoch, and with it ``fit()``."""
        if not self._fit.dead:
            self._fit.switch(None)


def driven(module: L.LightningModule, batches: list[Any]) -> float:
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
        run = DrivenFit(module, folder, accelerator="cpu", devices=1)
        stamps = []
        for _ in range(2):
            for batch in batches:
                stamps.append(time.perf_counter())
                run.step(batch)
        run.close()
    return _per_step(stamps)


def plain(module: Classifier, batches: list[Any]) -> float:
    optimizer = module.configure_optimizers()
    stamps = []
    for _ in range(2):
        for index, batch in enumerate(batches):
            stamps.append(time.perf_counter())
            module.training_step(batch, index).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return _per_step(stamps)


def arms(batches: list[Any]) -> dict[str, Callable[[], float]]:
    quiet = {"enable_progress_bar": False, "logger": False, "enable_checkpointing": False}
    return {
        "autotune's step (training_step, backward, optimizer)": lambda: plain(
            Classifier(), batches
        ),
        "fit(), Trainer defaults": lambda: fit(Classifier(), batches),
        "fit(), no progress bar": lambda: fit(Classifier(), batches, enable_progress_bar=False),
        "fit(), no logger": lambda: fit(Classifier(), batches, logger=False),
        "fit(), no progress bar, logger or checkpoints": lambda: fit(
            Classifier(), batches, **quiet
        ),
        "fit(), defaults, training_step without self.log": lambda: fit(Unlogged(), batches),
        "fit(), barebones=True, without self.log": lambda: fit(Unlogged(), batches, barebones=True),
        "fit(), Trainer defaults, driven a step at a time": lambda: driven(Classifier(), batches),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.batch_size < 1:
        parser.error("--rounds and --batch-size must be at least 1")
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    data = PhotosData()
    data.setup("fit")
    loader = DataLoader(data.train, batch_size=args.batch_size)  # type: ignore[arg-type]
    batches = [batch for _, batch in zip(range(STEPS), loader, strict=False)]
    times: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name, run in arms(batches).items():
            times.setdefault(name, []).append(run() * 1e3)
    plain_ms = statistics.median(next(iter(times.values())))
    print(f"batch {args.batch_size}, {args.rounds} interleaved rounds, ms a step")
    print("| run | ms a step (median, range) | beyond autotune's step |")
    print("|---|---|---|")
    for name, each in times.items():
        median = statistics.median(each)
        print(
            f"| {name} | {median:.2f} ({min(each):.2f}-{max(each):.2f})"
            f" | {median - plain_ms:+.2f} ms ({median / plain_ms:.2f}x) |"
        )


if __name__ == "__main__":
    main()
