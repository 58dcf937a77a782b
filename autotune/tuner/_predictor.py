"""The profile's predictions for one job: every configuration of its space, one configuration
on the grid or off it, the most it may reach, the scale the job's trials ran at (see
:mod:`autotune.tuner._calibration`) and the ceiling the search stops at."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from autotune.predict import (
    Predictions,
    Profile,
    predict_columns,
    predict_configs,
    predict_space,
)
from autotune.space import Config, SearchSpace
from autotune.tuner._calibration import (
    UNSCALED_KNOBS,
    ScaleClass,
    covered_ratios,
    highest_other_ratio,
    measured_scales,
    scale_per_configuration,
)

#: How far above its prediction a configuration may measure, in its prediction's uncertainties
#: (``Predictions.uncertainty``: 0.1 for one timed from measured points alone). Two: a
#: configuration timed from measured points alone has measured a fifth above its prediction,
#: while the widest misses were batches extrapolated past the step sweep, whose uncertainty
#: is 0.4 and more (evidence: ``benchmarks/log/``).
REACH_UNCERTAINTIES = 2


@dataclass(frozen=True)
class Predictor:
    """The profile's predictions for one job's space and memory budget."""

    profile: Profile
    space: SearchSpace
    memory_budget_bytes: int | None

    def all(self) -> Predictions:
        """Every configuration of the space, predicted (once)."""
        return self._of_space

    def eager(self) -> Predictions:
        """Every configuration of the space predicted without compiling (its eager twin), in
        the order of :meth:`all`: what a compiled one must beat to be worth its compile."""
        return self._eager

    def samples_per_s(self, config: Config) -> float | None:
        """The predicted samples/s of one configuration (on the grid or off it)."""
        return self._predicted(config)[0]

    def reach(self, config: Config) -> float | None:
        """The most samples/s the profile allows ``config``: its prediction raised by twice
        its uncertainty (:data:`REACH_UNCERTAINTIES`)."""
        value, uncertainty = self._predicted(config)
        return None if value is None else value * (1 + REACH_UNCERTAINTIES * uncertainty)

    def scale(self, config: Config, measured: Sequence[tuple[Config, float]]) -> float | None:
        """The scale the job's trials ran at, for ``config``: the median measured / predicted
        of ``measured`` other than ``config``'s own runs, in its :class:`ScaleClass` (see
        :func:`measured_scales`). None before any such trial, and where ``config`` sets a knob
        the profile's eager step does not time (its gain is no error of the profile's scale,
        :data:`UNSCALED_KNOBS`) or compiles (its ratio was read at one batch).

        The profile reads each point as the faster of two short windows in one moment, so it
        reads high against the trials' longer windows; the trials before a configuration tell
        that scale, and its own runs are left out so its prediction is made from what the job
        measured of the others.
        """
        predictions = predict_configs(self.profile, [config], self.memory_budget_bytes)
        if predictions.uncovered_knobs(0) & UNSCALED_KNOBS or config.compile != "off":
            return None
        key = config.key()
        others = [(other, value) for other, value in measured if other.key() != key]
        scales = measured_scales(covered_ratios(self.profile, others, self.memory_budget_bytes))
        return scales.get(ScaleClass.of(config, self.profile.device_type))

    def accumulation_gain(self, config: Config) -> float:
        """``config``'s predicted samples/s over the same configuration's without gradient
        accumulation (see :attr:`Profile.accumulation`); 1 where either is no figure."""
        alone = config.model_copy(update={"grad_accum_steps": 1})
        rates = predict_configs(
            self.profile, [alone, config], self.memory_budget_bytes
        ).samples_per_s
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = float(rates[1] / rates[0])
        return gain if math.isfinite(gain) and gain > 0 else 1.0

    def ceiling(
        self, measured: Sequence[tuple[Config, float]]
    ) -> tuple[float, float, float] | None:
        """The fastest samples/s the profile predicts for a configuration that fits: as it
        read it, on the scale its trials ran at (see :func:`measured_scales`), and on the
        highest scale a trial ran at other than the fastest measured (see
        :func:`highest_other_ratio`); None where nothing fits.

        The profile times each point for a fraction of a second, in one moment of a machine
        whose speed moves within minutes; its trials tell the scale, and each is noisy too, so
        the search takes all three (see :func:`autotune.search.at_ceiling`).
        """
        predictions = self._of_space
        covered = covered_ratios(self.profile, measured, self.memory_budget_bytes)
        scale = scale_per_configuration(predictions.columns, measured_scales(covered))
        rate = predictions.samples_per_s
        fits = ~predictions.over_memory & np.isfinite(rate)
        if not fits.any():
            return None
        read = float(rate[fits].max())
        highest = highest_other_ratio(covered)
        scaled = float((rate * scale)[fits].max())
        return read, scaled, read if highest is None else read * highest

    def _predicted(self, config: Config) -> tuple[float | None, float]:
        """One configuration's predicted samples/s (None where not a finite figure) and the
        prediction's uncertainty."""
        predictions = predict_configs(self.profile, [config], self.memory_budget_bytes)
        value = float(predictions.samples_per_s[0])
        finite = value if value == value and value != float("inf") else None
        return finite, float(predictions.uncertainty[0])

    @cached_property
    def _of_space(self) -> Predictions:
        return predict_space(self.profile, self.space, self.memory_budget_bytes)

    @cached_property
    def _eager(self) -> Predictions:
        columns = self._of_space.columns
        eager = dataclasses.replace(columns, compile=np.zeros_like(columns.compile))
        return predict_columns(self.profile, eager, self.memory_budget_bytes)
