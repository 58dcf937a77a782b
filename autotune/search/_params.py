"""A configuration of the space as Optuna parameters, and back.

An ordered numeric knob (batch size, workers, prefetch) is asked as an integer index into its
ascending values, so that the sampler knows 256 lies between 128 and 512; ``ordinal=False``
asks every knob as categories, as studies created before did. The space only describes knobs
and values; how a study names them lives here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna

from autotune.errors import ConfigError
from autotune.space import KNOBS, Config, SearchSpace


def index_param(name: str) -> str:
    """The Optuna parameter of an ordered knob: the index into its ascending values."""
    return f"{name}_index"


def _asked_knobs(space: SearchSpace, with_workers: bool) -> list[str]:
    """The searched knobs a trial is asked, in order: workers-only knobs only with workers."""
    return [name for name in space.searched if with_workers or not KNOBS[name].needs_workers]


def _suggest_knob(
    space: SearchSpace, trial: optuna.trial.BaseTrial, name: str, ordinal: bool
) -> Any:
    ordered = space.ordered_values(name) if ordinal else None
    if ordered is None:
        return trial.suggest_categorical(name, list(space.choices[name]))
    return ordered[trial.suggest_int(index_param(name), 0, len(ordered) - 1)]


def suggest_config(
    space: SearchSpace, trial: optuna.trial.BaseTrial, ordinal: bool = True
) -> Config:
    """Ask an Optuna trial for one configuration of ``space``."""
    values = {
        name: _suggest_knob(space, trial, name, ordinal)
        for name in _asked_knobs(space, with_workers=False)
    }
    if values.get("num_workers", space.choices["num_workers"][0]) > 0:
        for name in _asked_knobs(space, with_workers=True):
            if name not in values:
                values[name] = _suggest_knob(space, trial, name, ordinal)
    return space.config_from(values)


def params_of(space: SearchSpace, config: Config, ordinal: bool = True) -> dict[str, Any]:
    """The Optuna parameters that :func:`suggest_config` turns into ``config`` (to enqueue it).

    ``config`` must lie in the space (see :meth:`SearchSpace.contains`).
    """
    data = config.normalized().model_dump()
    params: dict[str, Any] = {}
    for name in _asked_knobs(space, with_workers=config.num_workers > 0):
        ordered = space.ordered_values(name) if ordinal else None
        value = space.spelling(name, data[name])
        if ordered is None:
            params[name] = value
        else:
            params[index_param(name)] = ordered.index(value)
    return params


def config_from_params(space: SearchSpace, params: Mapping[str, Any]) -> Config:
    """The configuration of an Optuna trial's parameters, ordinal or categorical.

    Raises:
        ConfigError: an index lies outside the space's values (the study was made for
            another space).
    """
    values: dict[str, Any] = {}
    for name in space.searched:
        if name in params:
            values[name] = params[name]
            continue
        ordered = space.ordered_values(name)
        index = params.get(index_param(name))
        if index is None or ordered is None:
            continue
        if not 0 <= index < len(ordered):
            raise ConfigError(
                f"the study's {index_param(name)}={index} lies outside this job's "
                f"{len(ordered)} values of {name}: the search space changed since the "
                "study was created; submit a new job instead of resuming this one"
            )
        values[name] = ordered[index]
    return space.config_from(values)
