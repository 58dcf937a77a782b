"""The profile's judgements in the search: a proposal predicted too slow to be worth a trial,
a neighbour of the best that cannot beat it, the least time a compile of a mode can take
(charged to a compiled proposal before it runs), and the ceiling the search stops at; bound to
one job's trials by :class:`JobJudges`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import numpy as np

from autotune.measure import MeasurePlan
from autotune.predict import compile_known_s, predict_configs
from autotune.search import CEILING_SHARE
from autotune.space import Config
from autotune.store import throughput_over_run
from autotune.tuner._budget import trial_seconds
from autotune.tuner._predictor import Predictor
from autotune.tuner._stored import JobTrials

#: A proposal of the sampler predicted under this share of the best measured so far is skipped
#: unmeasured. A third: the widest miss of a prediction seen on the built-ins (a batch
#: extrapolated past the step sweep) would still leave it short, while the proposals the
#: profile rules out by far (bf16 where a CPU emulates it, say) cost a job a large share of
#: its time, timeouts included (evidence: ``benchmarks/log/``).
SLOW_SHARE = 1 / 3

#: The least a compiled configuration must be predicted to gain over the run on its eager
#: twin, its compile charged, to be seeded or measured: a compile may take a quarter of a
#: default job's remaining time, and a gain within the spread of the profile's reading (the
#: share the search's ceiling allows, :data:`CEILING_SHARE`) is not worth one. Seeding every
#: compiled variant predicted a hair faster spent over half a default job compiling for a
#: gain of a hundredth (evidence: ``benchmarks/RESULTS.md``, "Compile within the job's
#: time").
MIN_COMPILE_GAIN = 1.0 - CEILING_SHARE


def predicted_too_slow(
    predictor: Predictor,
    config: Config,
    best: float,
    compile_s: float | None = None,
    run_samples: int | None = None,
    best_config: Config | None = None,
) -> str | None:
    """Why ``config`` is not worth measuring beside the best measured so far (samples/s over
    a run of ``run_samples``, of ``best_config`` where given), or None.

    A compiled configuration is charged ``compile_s`` (the shortest compile of its mode
    measured so far, a lower bound for this one, else the profile's timing of its mode), and
    without it the prediction is an upper bound of its throughput over the run.
    Where the profile predicted the best configuration below what it measured, the bar is that
    prediction: a profile that reads the whole workload slow (a tiny workload's step in a busy
    second, say) must not rule out every configuration beside a measured best.
    """
    predicted = predictor.samples_per_s(config)
    if predicted is None:
        return None
    charged = compile_s if config.compile != "off" else None
    over_run = throughput_over_run(predicted, charged, run_samples)
    best_predicted = None if best_config is None else predictor.samples_per_s(best_config)
    bar = min(best, best_predicted or best)
    if over_run >= SLOW_SHARE * bar:
        return None
    compiling = (
        f" over the run, {charged:.1f} s of compiling included" if over_run < predicted else ""
    )
    return (
        f"the profile predicts {over_run:,.1f} samples/s{compiling}, under a third of the "
        f"best measured so far ({best:,.1f})"
    )


def below_reach(
    predictor: Predictor, config: Config, best: float, best_config: Config
) -> str | None:
    """Why the profile rules ``config``, a neighbour of the best measured so far (``best``
    samples/s, of ``best_config``), out as a step up from it, or None.

    A neighbour is measured to find a slope (see :func:`autotune.search.run_search`), so it
    must be able to beat the best: it is ruled out where even its prediction raised by twice
    its uncertainty stays under the best, as measured or as predicted (the lower: a profile
    that reads the whole workload slow scales the neighbour down alike). A neighbour predicted
    at half the best otherwise costs a job a tenth of its time to confirm what the profile
    already said.
    """
    reach = predictor.reach(config)
    if reach is None:
        return None
    bar = min(best, predictor.samples_per_s(best_config) or best)
    if reach >= bar:
        return None
    return (
        f"the profile allows it at most {reach:,.1f} samples/s, under the best it is next "
        f"to ({best:,.1f} measured)"
    )


#: torch.compile's modes by the modes whose work each does and more: every other mode compiles
#: the graph default compiles, then benchmarks kernel choices (max-autotune and its variant
#: without CUDA graphs) or records CUDA graphs (reduce-overhead), so a default compile bounds
#: each from below; max-autotune does all its variant without CUDA graphs does.
COMPILE_AT_LEAST = {
    "default": ("default",),
    "reduce-overhead": ("default", "reduce-overhead"),
    "max-autotune-no-cudagraphs": ("default", "max-autotune-no-cudagraphs"),
    "max-autotune": ("default", "max-autotune-no-cudagraphs", "max-autotune"),
}


def compile_lower_bound(shortest_compile_s: Mapping[str, float], mode: str) -> float | None:
    """Seconds a compile of ``mode`` takes at least: the longest of the shortest compiles
    measured so far of ``mode`` and of the modes whose work it does too
    (:data:`COMPILE_AT_LEAST`); None when none was."""
    bounds = [
        shortest_compile_s[m] for m in COMPILE_AT_LEAST.get(mode, ()) if m in shortest_compile_s
    ]
    return max(bounds) if bounds else None


class JobJudges:
    """The profile's judgements bound to one job: what the search asks of them, read against
    the trials the job stored so far and the compiles it measured."""

    def __init__(
        self,
        predictor: Predictor,
        trials: JobTrials,
        run_samples: int | None,
        compile_allowance: Callable[[], float] | None = None,
        trial_allowance: tuple[MeasurePlan, Callable[[], float]] | None = None,
    ) -> None:
        self.predictor = predictor
        self.trials = trials
        #: Samples in the user's run, which compile time is charged against.
        self.run_samples = run_samples
        #: The seconds one compile may take now (a share of the job's remaining time).
        self.compile_allowance = compile_allowance
        #: The search's measure plan and the seconds one trial may take now (a share of the
        #: job's remaining time).
        self.trial_allowance = trial_allowance
        #: The shortest compile measured so far, by compile mode.
        self.shortest_compile_s: dict[str, float] = {}

    def compile_s(self, mode: str) -> float | None:
        """Seconds a compile of ``mode`` takes as this job knows it: at least the shortest
        measured in its trials (see :func:`compile_lower_bound`), else as the profile timed
        it; None where neither has a figure."""
        measured = compile_lower_bound(self.shortest_compile_s, mode)
        return measured if measured is not None else compile_known_s(self.predictor.profile, mode)

    def over_allowance(self, config: Config) -> str | None:
        """Why trying ``config`` costs more of the job than a trial may take now, or None:
        its mode's known compile seconds (:meth:`compile_s`) over :attr:`compile_allowance`,
        a compile the profile timed predicted to gain under :data:`MIN_COMPILE_GAIN` over the
        run on the eager twin, or its trial's predicted seconds (:func:`trial_seconds`, that
        compile included) over :attr:`trial_allowance`."""
        known = None if config.compile == "off" else self.compile_s(config.compile)
        if known is not None and self.compile_allowance is not None:
            allowance = self.compile_allowance()
            if known > allowance:
                return (
                    f"compiling ({config.compile}) takes {known:,.0f} s, over the "
                    f"{allowance:,.0f} s one compile may take of the job's remaining time"
                )
        gain = None if known is None else self._compile_gain(config, known)
        if gain is not None and gain < 1.0 + MIN_COMPILE_GAIN:
            return (
                f"compiling ({config.compile}) is predicted to gain {gain - 1.0:+.1%} over the "
                f"run on the same configuration uncompiled, {known:,.0f} s of compiling "
                "included: not worth a compile"
            )
        if self.trial_allowance is None:
            return None
        plan, trial_allowance = self.trial_allowance
        predicted = predict_configs(
            self.predictor.profile, [config], self.predictor.memory_budget_bytes
        )
        predicted = dataclasses.replace(predicted, compile_s=np.array([known or 0.0]))
        seconds = float(trial_seconds(predicted, plan)[0])
        allowance = trial_allowance()
        if not seconds > allowance:  # NaN (no prediction) passes
            return None
        return (
            f"its trial is predicted to take {seconds:,.0f} s at least, over the "
            f"{allowance:,.0f} s one trial may take of the job's remaining time"
        )

    def _compile_gain(self, config: Config, compile_s: float) -> float | None:
        """``config``'s predicted samples/s over the run, ``compile_s`` of compiling charged,
        over its eager twin's; None where the profile did not time its mode's step."""
        point = self.predictor.profile.compile_point(config.compile)
        if point is None or point.ratio is None:
            return None
        predicted = self.predictor.samples_per_s(config)
        eager = self.predictor.samples_per_s(config.model_copy(update={"compile": "off"}))
        if not predicted or not eager:
            return None
        return throughput_over_run(predicted, compile_s, self.run_samples) / eager

    def compiled(self, mode: str, compile_s: float) -> None:
        """Note a compile of ``mode`` measured at ``compile_s``."""
        self.shortest_compile_s[mode] = min(
            compile_s, self.shortest_compile_s.get(mode, float("inf"))
        )

    def predicted_slow(self, config: Config, best_config: Config, best: float) -> str | None:
        """Why the profile rules ``config`` out beside ``best_config`` (measured at ``best``),
        charging a compiled one the least compile time its mode can take, from the compiles
        measured so far in this job (else as the profile timed it); a compiled one whose
        compile costs more than the job may spend on it (:meth:`over_allowance`) too."""
        over = self.over_allowance(config)
        if over is not None:
            return over
        return predicted_too_slow(
            self.predictor,
            config,
            best,
            self.compile_s(config.compile) if config.compile != "off" else None,
            self.run_samples,
            best_config,
        )

    def below_reach(self, config: Config, best_config: Config, best: float) -> str | None:
        """Why the profile rules ``config``, a neighbour of ``best_config``, out as a step up
        (or its compile, see :meth:`over_allowance`)."""
        return self.over_allowance(config) or below_reach(self.predictor, config, best, best_config)

    def ceiling(self) -> tuple[float, float, float] | None:
        """The profile's ceiling (the fastest it predicts for a configuration that fits), as
        it read it and on the scales this job's trials ran at (see :meth:`Predictor.ceiling`)."""
        return self.predictor.ceiling(self._measured(confirmed=False))

    def scale(self, config: Config) -> float | None:
        """The scale this job's trials so far ran at against the profile, for ``config``
        (see :meth:`Predictor.scale`): stored beside its prediction, before it runs."""
        return self.predictor.scale(config, self._measured(confirmed=True))

    def _measured(self, confirmed: bool) -> list[tuple[Config, float]]:
        return [
            (record.config, record.samples_per_s or 0.0)
            for record in self.trials.searched_records(confirmed)
            if record.usable
        ]
