"""Predict every configuration of a space from a profile, without running any of them.

A configuration trains no faster than its step alone (at its batch, precision and layout) nor
than its loader alone (at its worker count, and with more batches ahead per worker than the
sweep's one, without the wait the profile timed that costs); without workers the two run one
after the other. :func:`predict_columns` composes the stages, each in its own module:

1. the loader alone (:mod:`~autotune.predict._loader`, scaled to the batch by
   :mod:`~autotune.predict._loader_model`);
2. the step alone (:mod:`~autotune.predict._step`), with the training thread's receiving and
   copying of each batch added;
3. the CPU host's effects (:mod:`~autotune.predict._host_effects`: glibc's heap, fork
   copy-on-write, shared cores), none on a CUDA device;
4. over a dataset of known length, whole epochs (:mod:`~autotune.predict._epochs`): rounds of
   the workers, filling and draining the pipeline, restarting workers;
5. the bounds joined (:mod:`~autotune.predict._soft_min`), memory from the profile's linear
   memory model, and the uncertainty (:mod:`~autotune.predict._uncertainty`);
6. one rank's samples/s times the ranks the profile ran as: global samples/s, the trials'
   unit (memory stays one rank's, as the budget is).

The work is done on NumPy columns (:class:`Columns`): the profile's tables are evaluated once
per distinct batch/precision/layout and worker count, then gathered, so hundreds of thousands
of configurations take well under a second.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autotune.predict._columns import Columns, FloatArray, IntArray, epoch_samples
from autotune.predict._compile import compile_columns
from autotune.predict._epochs import over_epochs
from autotune.predict._host_effects import HostEffects, host_effects
from autotune.predict._loader import loader_columns, loader_memory
from autotune.predict._predictions import LOADER, MEMORY, STEP, Predictions
from autotune.predict._profile import Profile
from autotune.predict._soft_min import soft_min
from autotune.predict._step import step_columns
from autotune.predict._uncertainty import BASE_UNCERTAINTY, combined, uncovered_knobs
from autotune.space import Config, SearchSpace


def predict_columns(
    profile: Profile, columns: Columns, memory_budget_bytes: int | None = None
) -> Predictions:
    """Predict each configuration of ``columns``; see the module's description."""
    loader = loader_columns(profile, columns)
    step = step_columns(profile, columns, loader.receive_s)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        host = host_effects(profile, columns, step, loader)
        step_rate = host.step.training_samples_per_s
        loader_rate, epoch_start_s = loader.samples_per_s, np.zeros(len(columns))
        if profile.dataset_length:
            loader_rate, epoch_start_s = over_epochs(profile, columns, step_rate, loader)
            epoch_start_s = epoch_start_s + host.epoch_start_s
        rate, bound = _joined(columns, step_rate, loader_rate, host)
        if profile.dataset_length:
            epoch = epoch_samples(profile.dataset_length, columns.batch_size)
            rate = epoch / (epoch / rate + epoch_start_s)
    # The one place the unit changes: the profile's rates are one rank's (see
    # :class:`Profile`), the predictions global samples/s, as every rank steps alike.
    rate, step_rate, loader_rate = (r * profile.ranks for r in (rate, step_rate, loader_rate))
    memory = step.memory_bytes + loader_memory(profile, columns)
    over = step.out_of_memory.copy()
    if memory_budget_bytes is not None:
        over |= np.nan_to_num(memory, nan=0.0) > memory_budget_bytes
    uncovered = uncovered_knobs(profile, columns)
    return Predictions(
        columns=columns,
        samples_per_s=rate,
        memory_bytes=memory,
        over_memory=over,
        uncertainty=combined(step.uncertainty, loader.uncertainty, uncovered),
        bound=np.where(over, MEMORY, bound),
        step_samples_per_s=step_rate,
        loader_samples_per_s=loader_rate,
        uncovered=uncovered,
        compile_s=compile_columns(profile, columns).compile_s,
        step_timed=step.timed,
    )


def _joined(
    columns: Columns, step_rate: FloatArray, loader_rate: FloatArray, host: HostEffects
) -> tuple[FloatArray, IntArray]:
    """Samples/s of the step and the loader together, and the side that bounds them.

    Without workers the two run one after the other, at most at the cores' share. With
    workers they run side by side: the soft minimum of the step and the loader beside it.
    Workers beside a step on every core always cost it a little: the cores are named the
    bound only where they cost the step more than its prediction's own uncertainty.
    """
    no_workers = columns.num_workers == 0
    cores = host.cores_samples_per_s
    serial = 1.0 / (1.0 / step_rate + 1.0 / loader_rate)
    named = np.where(cores < (1.0 - BASE_UNCERTAINTY) * step_rate, cores, np.inf)
    # The index of the smallest is the bound's code: STEP, LOADER, CPU.
    side = np.argmin(np.stack([step_rate, loader_rate, named]), axis=0).astype(np.int64)
    beside = soft_min(np.stack([step_rate, host.loader_beside_step(loader_rate)]))
    rate = np.where(no_workers, np.minimum(serial, cores), beside)
    in_turn = no_workers & (serial <= cores)
    side = np.where(in_turn & (step_rate < loader_rate), STEP, np.where(in_turn, LOADER, side))
    return rate, side


def predict_space(
    profile: Profile, space: SearchSpace, memory_budget_bytes: int | None = None
) -> Predictions:
    """Predict every configuration of ``space``."""
    return predict_columns(profile, Columns.of_space(space), memory_budget_bytes)


def predict_configs(
    profile: Profile, configs: Sequence[Config], memory_budget_bytes: int | None = None
) -> Predictions:
    """Predict the given configurations (any, on the grid or off it)."""
    return predict_columns(profile, Columns.of(configs), memory_budget_bytes)
