"""The compile column: what ``torch.compile`` in each mode does to a step, as the profile timed it.

The profile times each compile mode the space searches once, at a small batch, against the
eager step beside it (:class:`~autotune.predict.CompilePoint`): a compiled configuration's step
is its eager step scaled by that ratio, and its compile seconds are charged over the run by
whoever ranks it over the run (:meth:`~autotune.predict.Predictions.over_run`). A mode the
profile did not time (no point, a compile over its allowance, one that failed) keeps the eager
step and an unknown compile (NaN seconds): only a trial can tell, so it stays an uncovered knob
(:data:`~autotune.predict._uncertainty.UNCOVERED_KNOB`) and is never seeded from the profile.

Like every knob the profile times, compile is a column, read once per distinct value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.predict._columns import COMPILE_MODES, BoolArray, Columns, FloatArray
from autotune.predict._profile import Profile

#: Added to a compiled configuration's uncertainty where its mode was timed: the ratio was read
#: at one batch and holds for every batch only as a model (a compiled step saves per-call
#: overheads, which weigh less at larger batches).
COMPILE_TIMED = 0.2


@dataclass(frozen=True)
class CompileColumns:
    """Per configuration: its step's factor, its compile seconds (0 eager, NaN unknown), and
    whether the profile timed its mode (True for the eager ones)."""

    ratio: FloatArray
    compile_s: FloatArray
    timed: BoolArray


def compile_columns(profile: Profile, columns: Columns) -> CompileColumns:
    """The compile column of every configuration of ``columns`` (see the module's description)."""
    n = len(columns)
    ratio, compile_s = np.ones(n), np.zeros(n)
    timed = columns.compile == 0
    for code in np.unique(columns.compile):
        if code == 0:
            continue
        where = columns.compile == code
        point = profile.compile_point(COMPILE_MODES[int(code)])
        measured = None if point is None else point.ratio
        if point is None or measured is None:
            compile_s[where] = np.nan
            continue
        ratio[where], compile_s[where], timed[where] = measured, point.compile_s, True
    return CompileColumns(ratio=ratio, compile_s=compile_s, timed=timed)


def compile_known_s(profile: Profile, mode: str) -> float | None:
    """Seconds a compile of ``mode`` takes as the profile knows it: timed, or at least its
    allowance where it outlasted it; None where the profile has no figure."""
    point = profile.compile_point(mode)
    if point is None or (point.error is not None and not point.over_budget):
        return None
    return point.compile_s
