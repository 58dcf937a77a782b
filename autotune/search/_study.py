"""The Optuna study of a job, stored in the same database as autotune's own tables."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import ConfigError
from autotune.space import SearchSpace
from autotune.store import configure_sqlite

optuna.logging.set_verbosity(optuna.logging.WARNING)


#: The study's user attribute naming how ordered knobs are asked: "ordinal" (an index into
#: their values) or "categorical" (each value a category, as studies created before did).
PARAMS_ATTR = "params"
#: ... and the one holding the values the indices of an ordinal study point into.
ORDERED_VALUES_ATTR = "ordered_values"
#: How a new study asks ordered knobs. Both are supported for good (studies of either kind
#: resume); benchmarks/search_replay.py compares them on measured grids.
NEW_STUDY_PARAMS = "ordinal"


def study_name_for(job_id: int, measurement_set: int = 1) -> str:
    """The study of one measurement set of a job: a new set starts a new study, so that the
    sampler never learns from values measured on other hardware."""
    base = f"autotune-job-{job_id}"
    return base if measurement_set == 1 else f"{base}-set-{measurement_set}"


def _ordered_values(space: SearchSpace) -> dict[str, list[int]]:
    return {
        name: list(values)
        for name in space.searched
        if (values := space.ordered_values(name)) is not None
    }


def ordinal_params(study: optuna.Study, space: SearchSpace | None = None) -> bool:
    """Whether the study asks ordered knobs as indices; decided once, when first asked.

    A new study is ordinal (:data:`NEW_STUDY_PARAMS`), and records the values its indices
    point into. One that already
    holds trials without the mark was created as categorical, and stays so: its trials and
    queued configurations use those parameters, and Optuna's exhaustive sampler cannot mix two
    namings of one knob. Given ``space``, an ordinal study is checked against it.

    Raises:
        ConfigError: ``space`` orders other values than the study's indices point into.
    """
    attrs = study.user_attrs
    style = attrs.get(PARAMS_ATTR)
    if style is None:
        style = "categorical" if study.get_trials(deepcopy=False) else NEW_STUDY_PARAMS
        study.set_user_attr(PARAMS_ATTR, style)
        if style == "ordinal" and space is not None:
            study.set_user_attr(ORDERED_VALUES_ATTR, _ordered_values(space))
    elif style == "ordinal" and space is not None:
        recorded = attrs.get(ORDERED_VALUES_ATTR)
        if recorded is None:
            study.set_user_attr(ORDERED_VALUES_ATTR, _ordered_values(space))
        elif recorded != (now := _ordered_values(space)):
            changed = sorted(n for n in set(recorded) | set(now) if recorded.get(n) != now.get(n))
            raise ConfigError(
                f"the search space changed since this study started (values of "
                f"{', '.join(changed)}), so its trials' indices would name other values; "
                "submit a new job instead of resuming this one"
            )
    return style == "ordinal"


class ExhaustiveSampler(optuna.samplers.BruteForceSampler):
    """Optuna's exhaustive sampler, made usable with ask-and-tell.

    When every configuration has been tried it calls ``study.stop()``, which only works inside
    ``study.optimize``; here the search loop reads :attr:`exhausted` instead.
    """

    exhausted = False

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        try:
            super().after_trial(study, trial, state, values)
        except RuntimeError:  # raised by study.stop() outside optimize: the space is done
            self.exhausted = True


def make_sampler(space: SearchSpace, n_trials: int, seed: int) -> optuna.samplers.BaseSampler:
    """Exhaustive search when the whole space fits the budget, else multivariate TPE.

    Every sampler setting we rely on is set explicitly: Optuna's defaults move between versions.
    """
    if space.size() <= n_trials:
        return ExhaustiveSampler(seed=seed, avoid_premature_stop=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return _tpe(seed, n_trials)


def _tpe(seed: int, n_trials: int) -> optuna.samplers.TPESampler:
    return optuna.samplers.TPESampler(
        seed=seed,
        multivariate=True,
        group=True,  # the space is conditional: prefetch/persistence exist only with workers
        constant_liar=False,  # one trial at a time per job
        n_startup_trials=max(3, min(10, n_trials // 3)),
    )


def open_study(
    storage_url: str,
    job_id: int,
    space: SearchSpace,
    n_trials: int,
    seed: int,
    measurement_set: int = 1,
) -> optuna.Study:
    """Create the study of the job's measurement set, or load it to resume.

    Raises :class:`ConfigError` when the study's indices were made for other knob values.

    The study has no pruner: a trial's progress is judged in memory while it runs (see
    :func:`~autotune.search.clearly_slow`), against values read before it started, so that
    nothing touches the storage during a timed window.
    """
    storage = optuna.storages.RDBStorage(storage_url, engine_kwargs=_engine_kwargs(storage_url))
    if storage.engine.dialect.name == "sqlite":
        # Optuna's read-then-write transactions would otherwise fail when a worker's heartbeat
        # commits in between; drop the connections made before the hooks were attached.
        configure_sqlite(storage.engine, always_immediate=True)
        storage.engine.dispose()
    study = optuna.create_study(
        storage=storage,
        study_name=study_name_for(job_id, measurement_set),
        direction="maximize",
        sampler=make_sampler(space, n_trials, seed),
        pruner=optuna.pruners.NopPruner(),
        load_if_exists=True,
    )
    ordinal_params(study, space)  # marks a new study; refuses one made for another space
    return study


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 30}}
    return {}
