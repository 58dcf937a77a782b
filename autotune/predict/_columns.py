"""Configurations as NumPy columns, the form every stage of the predictor reads.

A space holds hundreds of thousands of configurations; the predictor evaluates the profile's
tables once per distinct batch, precision, layout and worker count and gathers the results
into these columns, so predicting them all takes well under a second.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from autotune.space import KNOBS, TORCH_DEFAULT_PREFETCH_FACTOR, Config, SearchSpace

#: The precisions and compile modes, in the order of their codes in :class:`Columns`.
AMPS = ("off", "fp16", "bf16")
COMPILE_MODES = ("off", "default", "max-autotune", "reduce-overhead", "max-autotune-no-cudagraphs")
OPTIMIZER_IMPLS = ("default", "foreach", "fused")

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Columns:
    """Configurations as NumPy columns (one entry per configuration)."""

    batch_size: IntArray
    num_workers: IntArray
    amp: IntArray  # index into ("off", "fp16", "bf16")
    channels_last: BoolArray
    pin_memory: BoolArray
    device_prefetch: BoolArray
    persistent_workers: BoolArray
    prefetch_factor: IntArray  # 0 without workers
    cudnn_benchmark: BoolArray
    tf32: BoolArray  # True when TF32 is forced on
    compile: IntArray  # index into ("off", "default", "max-autotune")
    retain_freed_memory: BoolArray
    intra_op_threads: IntArray  # 0: PyTorch's default
    grad_accum_steps: IntArray  # micro-batches per optimizer step
    optimizer_impl: IntArray  # index into OPTIMIZER_IMPLS
    expandable_segments: BoolArray
    in_order: BoolArray  # True without workers

    def __len__(self) -> int:
        return len(self.batch_size)

    @classmethod
    def of(cls, configs: Iterable[Config]) -> Columns:
        rows = [c.normalized() for c in configs]
        return cls(
            batch_size=np.array([c.batch_size for c in rows], dtype=np.int64),
            num_workers=np.array([c.num_workers for c in rows], dtype=np.int64),
            amp=np.array([AMPS.index(c.amp) for c in rows], dtype=np.int64),
            channels_last=np.array([c.channels_last for c in rows], dtype=bool),
            pin_memory=np.array([c.pin_memory for c in rows], dtype=bool),
            device_prefetch=np.array([c.device_prefetch for c in rows], dtype=bool),
            persistent_workers=np.array([c.persistent_workers for c in rows], dtype=bool),
            prefetch_factor=np.array([c.prefetch_factor or 0 for c in rows], dtype=np.int64),
            cudnn_benchmark=np.array([c.cudnn_benchmark for c in rows], dtype=bool),
            tf32=np.array([c.tf32 is True for c in rows], dtype=bool),
            compile=np.array([COMPILE_MODES.index(c.compile) for c in rows], dtype=np.int64),
            retain_freed_memory=np.array([c.retain_freed_memory for c in rows], dtype=bool),
            intra_op_threads=np.array([c.intra_op_threads or 0 for c in rows], dtype=np.int64),
            grad_accum_steps=np.array([c.grad_accum_steps for c in rows], dtype=np.int64),
            optimizer_impl=np.array(
                [OPTIMIZER_IMPLS.index(c.optimizer_impl) for c in rows], dtype=np.int64
            ),
            expandable_segments=np.array([c.expandable_segments for c in rows], dtype=bool),
            in_order=np.array([c.in_order for c in rows], dtype=bool),
        )

    @classmethod
    def of_space(cls, space: SearchSpace) -> Columns:
        """Every configuration of ``space``, in the order of :meth:`SearchSpace.all_configs`."""
        names = [n for n in space.choices if not KNOBS[n].needs_workers]
        with_workers = [n for n in space.choices if KNOBS[n].needs_workers]
        values = {n: _value_array(n, space.choices[n]) for n in space.choices}
        base = np.indices([len(space.choices[n]) for n in names]).reshape(len(names), -1)
        worker_index = base[names.index("num_workers")]
        has_workers = values["num_workers"][worker_index] > 0
        extra = np.indices([len(space.choices[n]) for n in with_workers]).reshape(
            len(with_workers), -1
        )
        per_row = np.where(has_workers, extra.shape[1], 1)
        rows = np.repeat(np.arange(base.shape[1]), per_row)
        # For each row with workers, every combination of the workers-only knobs, in order.
        offsets = np.arange(len(rows)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
        columns: dict[str, Any] = {}
        for i, name in enumerate(names):
            columns[name] = values[name][base[i][rows]]
        workers_on = columns["num_workers"] > 0
        for i, name in enumerate(with_workers):
            picked = values[name][extra[i][offsets]]
            columns[name] = np.where(workers_on, picked, 0)
        prefetch = columns["prefetch_factor"].astype(np.int64)
        columns["prefetch_factor"] = np.where(
            workers_on & (prefetch == 0), TORCH_DEFAULT_PREFETCH_FACTOR, prefetch
        )
        columns["persistent_workers"] = columns["persistent_workers"].astype(bool)
        columns["in_order"] = np.where(workers_on, columns["in_order"], True).astype(bool)
        columns["grad_accum_steps"] = (
            np.ones(len(rows), dtype=np.int64)
            if space.effective_batch is None
            else space.effective_batch // columns["batch_size"]
        )
        return cls(**{name: columns[name] for name in cls.__dataclass_fields__})


def _value_array(name: str, choices: Sequence[Any]) -> npt.NDArray[Any]:
    """A knob's choices as numbers: precision as its index, null as 0 (tf32: not forced)."""
    if name == "amp":
        return np.array([AMPS.index(v) for v in choices], dtype=np.int64)
    if name == "compile":
        return np.array([COMPILE_MODES.index(v) for v in choices], dtype=np.int64)
    if name == "optimizer_impl":
        return np.array([OPTIMIZER_IMPLS.index(v) for v in choices], dtype=np.int64)
    if name == "tf32":
        return np.array([v is True for v in choices], dtype=bool)
    if name in ("prefetch_factor", "intra_op_threads"):
        return np.array([v or 0 for v in choices], dtype=np.int64)
    if KNOBS[name].is_flag:
        return np.array([bool(v) for v in choices], dtype=bool)
    return np.array(choices, dtype=np.int64)


def epoch_steps(dataset_length: int, batch_size: IntArray) -> IntArray:
    """Steps an epoch trains: whole batches only (trials drop the last partial one)."""
    return np.asarray(np.maximum(1, dataset_length // batch_size), dtype=np.int64)


def epoch_samples(dataset_length: int, batch_size: IntArray) -> FloatArray:
    """Samples an epoch trains on: its steps' whole batches."""
    return np.asarray(epoch_steps(dataset_length, batch_size) * batch_size, dtype=np.float64)
