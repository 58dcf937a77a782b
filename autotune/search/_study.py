"""The Optuna study of a job, stored in the same database as autotune's own tables."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.search._pruner import RelativeToBestPruner
from autotune.space import SearchSpace
from autotune.store import configure_sqlite

optuna.logging.set_verbosity(optuna.logging.WARNING)


def study_name_for(job_id: int) -> str:
    return f"autotune-job-{job_id}"


class ExhaustiveSampler(optuna.samplers.BruteForceSampler):
    """Optuna's exhaustive sampler, made usable with ask-and-tell.

    When every configuration has been tried it calls ``study.stop()``, which only works inside
    ``study.optimize``; here the search loop reads :attr:`exhausted` instead.
    """

    exhausted = False

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
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
    storage_url: str, job_id: int, space: SearchSpace, n_trials: int, seed: int, prune: bool
) -> optuna.Study:
    """Create the job's study, or load it to resume."""
    storage = optuna.storages.RDBStorage(
        storage_url, engine_kwargs=_engine_kwargs(storage_url)
    )
    if storage.engine.dialect.name == "sqlite":
        # Optuna's read-then-write transactions would otherwise fail when a worker's heartbeat
        # commits in between; drop the connections made before the hooks were attached.
        configure_sqlite(storage.engine, always_immediate=True)
        storage.engine.dispose()
    pruner: optuna.pruners.BasePruner = (
        RelativeToBestPruner() if prune else optuna.pruners.NopPruner()
    )
    return optuna.create_study(
        storage=storage,
        study_name=study_name_for(job_id),
        direction="maximize",
        sampler=make_sampler(space, n_trials, seed),
        pruner=pruner,
        load_if_exists=True,
    )


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 30}}
    return {}
