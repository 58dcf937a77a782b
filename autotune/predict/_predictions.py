"""What the predictor returns: per configuration its samples/s, memory, uncertainty and bound.

:class:`Predictions` holds one entry per configuration of its :class:`Columns`, with the
questions the search and the tuner ask of them (the fastest that fit, the least known, the
knobs a configuration sets otherwise than the profile ran them), and :func:`ranking` turns
them back into configurations of a space.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune.predict._columns import (
    AMPS,
    COMPILE_MODES,
    OPTIMIZER_IMPLS,
    BoolArray,
    Columns,
    FloatArray,
    IntArray,
)
from autotune.space import Config, SearchSpace

#: Which side bounds a prediction, by code in :attr:`Predictions.bound`.
BOUNDS = ("step", "loader", "cpu", "memory")
STEP, LOADER, CPU, MEMORY = range(4)


@dataclass(frozen=True)
class Predictions:
    """Predicted samples/s, memory, uncertainty and bounding side of each configuration."""

    columns: Columns
    samples_per_s: FloatArray
    memory_bytes: FloatArray  # NaN where the profile has no memory model
    over_memory: BoolArray
    uncertainty: FloatArray
    bound: IntArray  # index into BOUNDS
    #: The step's samples/s at each configuration's batch, precision and layout, receiving
    #: and copying its batches included: the bound a free loader leaves.
    step_samples_per_s: FloatArray
    #: The loader's samples/s at each configuration's workers and batch, over whole epochs:
    #: the bound a free step leaves.
    loader_samples_per_s: FloatArray
    #: Per knob the profile does not cover, the configurations that turn it away from what the
    #: profile ran (see :data:`autotune.predict._uncertainty.UNCOVERED_KNOB`).
    uncovered: dict[str, BoolArray]
    #: Seconds each configuration compiles for, as the profile timed its mode: 0 eager, NaN
    #: where the profile did not time it (see :mod:`autotune.predict._compile`).
    compile_s: FloatArray
    #: Whether the step sweep timed each configuration's batch, or a larger one, in its
    #: precision and layout: where it did not, the step's rate is the largest timed batch's
    #: carried over, a guess only a trial can check.
    step_timed: BoolArray

    def __len__(self) -> int:
        return len(self.samples_per_s)

    def values(self, index: int) -> dict[str, Any]:
        """Knob values of configuration ``index`` (for :meth:`SearchSpace.config_from`)."""
        c = self.columns
        workers = int(c.num_workers[index])
        return {
            "batch_size": int(c.batch_size[index]),
            "num_workers": workers,
            "amp": AMPS[int(c.amp[index])],
            "channels_last": bool(c.channels_last[index]),
            "pin_memory": bool(c.pin_memory[index]),
            "device_prefetch": bool(c.device_prefetch[index]),
            "persistent_workers": bool(c.persistent_workers[index]) and workers > 0,
            "prefetch_factor": int(c.prefetch_factor[index]) or None,
            "cudnn_benchmark": bool(c.cudnn_benchmark[index]),
            "tf32": True if c.tf32[index] else None,
            "compile": COMPILE_MODES[int(c.compile[index])],
            "retain_freed_memory": bool(c.retain_freed_memory[index]),
            "intra_op_threads": int(c.intra_op_threads[index]) or None,
            "optimizer_impl": OPTIMIZER_IMPLS[int(c.optimizer_impl[index])],
            "expandable_segments": bool(c.expandable_segments[index]),
            "in_order": bool(c.in_order[index]) or workers == 0,
        }

    def over_run(self, run_samples: int | None) -> FloatArray:
        """Predicted samples/s over a run of ``run_samples``, each compile's seconds charged
        once (an unknown compile as none: an upper bound); samples/s without a run length."""
        rate = self.samples_per_s
        if run_samples is None:
            return rate
        charged = np.nan_to_num(self.compile_s, nan=0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(run_samples / (run_samples / rate + charged), dtype=np.float64)

    def best(self, count: int) -> list[int]:
        """Indices of the ``count`` fastest configurations predicted to fit in memory; of
        equal predictions, the more certain first (the one closer to what the profile ran)."""
        rate = np.where(self.over_memory, -np.inf, self.samples_per_s)
        order = np.lexsort((self.uncertainty, -rate))
        return [int(i) for i in order[:count] if np.isfinite(rate[i])]

    def most_uncertain(self, count: int, among: int | None = None) -> list[int]:
        """Indices of the ``count`` most uncertain configurations that fit, preferring fast
        ones: among the ``among`` fastest (all by default), the highest uncertainty."""
        fits = np.flatnonzero(~self.over_memory)
        if among is not None:
            fits = fits[np.argsort(-self.samples_per_s[fits], kind="stable")[:among]]
        order = fits[np.argsort(-self.uncertainty[fits], kind="stable")]
        return [int(i) for i in order[:count]]

    def uncovered_knobs(self, index: int) -> frozenset[str]:
        """The knobs configuration ``index`` sets otherwise than the profile ran them."""
        return frozenset(name for name, mask in self.uncovered.items() if mask[index])

    def bound_name(self, index: int) -> str:
        return BOUNDS[int(self.bound[index])]


def ranking(
    predictions: Predictions, space: SearchSpace, count: int | None = None
) -> list[tuple[Config, float]]:
    """Configurations by predicted samples/s, fastest first, those over memory left out."""
    indices = predictions.best(count if count is not None else len(predictions))
    return [
        (space.config_from(predictions.values(i)), float(predictions.samples_per_s[i]))
        for i in indices
    ]
