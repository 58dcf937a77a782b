"""The optimizer column: what each optimizer implementation does to a step, as the profile timed it.

The profile times the step once per implementation the space searches (``foreach``,
``fused``), at a small batch, against the step with the optimizer as the workload builds it
(:class:`~autotune.predict.OptimizerPoint`). An implementation changes the optimizer's update,
paid once per optimizer step whatever the batch, so a configuration's step is shortened by the
seconds the profile saw it save (once per ``grad_accum_steps`` micro-batches), at most by the
share of the step it saved where it was timed. An implementation the profile did not time (no
point, or one that could not step) keeps the default's step and stays an uncovered knob
(:data:`~autotune.predict._uncertainty.UNCOVERED_KNOB`): only a trial can tell.

Like every knob the profile times, the optimizer's implementation is a column, read once per
distinct value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.predict._columns import OPTIMIZER_IMPLS, BoolArray, Columns, FloatArray
from autotune.predict._profile import Profile

#: Added to a configuration's uncertainty where its implementation was timed: the seconds
#: saved were read at one batch, in one precision, from two short windows.
OPTIMIZER_TIMED = 0.1


@dataclass(frozen=True)
class OptimizerColumns:
    """Per configuration: the seconds its implementation saves each optimizer step (0 for the
    default and for one not timed), the most share of a step it may save (the share it saved
    where timed), and whether the profile timed it (True for the default)."""

    saved_s: FloatArray
    most_share: FloatArray
    timed: BoolArray


def optimizer_columns(profile: Profile, columns: Columns) -> OptimizerColumns:
    """The optimizer column of every configuration of ``columns`` (see the module's
    description)."""
    n = len(columns)
    saved, most_share = np.zeros(n), np.zeros(n)
    timed = columns.optimizer_impl == 0
    for code in np.unique(columns.optimizer_impl):
        if code == 0:
            continue
        point = profile.optimizer_point(OPTIMIZER_IMPLS[int(code)])
        if point is None or point.saved_s is None or point.default_samples_per_s is None:
            continue
        where = columns.optimizer_impl == code
        step_s = point.batch_size / point.default_samples_per_s
        saved[where], timed[where] = point.saved_s, True
        most_share[where] = abs(point.saved_s) / step_s
    return OptimizerColumns(saved_s=saved, most_share=most_share, timed=timed)


def with_optimizer(
    profile: Profile, columns: Columns, rate: FloatArray, cpu: FloatArray
) -> tuple[FloatArray, FloatArray, BoolArray]:
    """The step's samples/s and CPU seconds per sample with each configuration's optimizer
    implementation (see the module's description), and which the profile timed."""
    column = optimizer_columns(profile, columns)
    batch = columns.batch_size.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        step_s = batch / rate
        per_step = column.saved_s / columns.grad_accum_steps
        bound = column.most_share * step_s
        changed = step_s - np.clip(per_step, -bound, bound)
        share = np.where(column.saved_s != 0, changed / step_s, 1.0)
    share = np.nan_to_num(share, nan=1.0)
    return rate / share, cpu * share, column.timed
