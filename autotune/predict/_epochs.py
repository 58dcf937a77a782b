"""The loader over whole epochs of a dataset of known length, and what each epoch's start costs.

The workers share an epoch's batches out one each per round: the last round is part-empty and
workers beyond the epoch's batch count idle. Each epoch fills and drains the pipeline, and
without persistent workers starts the workers again; the steady rates of the loader alone and
the step alone leave all three out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autotune.predict._columns import Columns, FloatArray, epoch_samples, epoch_steps
from autotune.predict._loader import LoaderColumns, loader_rates
from autotune.predict._profile import LoaderPoint, Profile


def over_epochs(
    profile: Profile, columns: Columns, step_rate: FloatArray, loader: LoaderColumns
) -> tuple[FloatArray, FloatArray]:
    """The loader's samples/s over whole epochs, and the seconds each epoch adds beyond its
    steady state, beside a step of ``step_rate`` samples/s.

    The epoch takes its full rounds, then a last round of the batches left (as fast as that
    many workers deliver), and workers beyond the epoch's batch count have nothing to do
    (batch 256 of 4,096 samples keeps 16 of 48 workers busy). Filling and draining the
    pipeline, the step waits for the first round, or the loader for the last step, whichever
    the slower side does not hide. Without persistent workers the epoch also starts the
    workers again (the loader sweep's start seconds per worker). Configurations without
    workers are returned unchanged.
    """
    batch = columns.batch_size.astype(np.float64)
    workers = columns.num_workers
    steps = epoch_steps(profile.dataset_length or 0, columns.batch_size)
    epoch = epoch_samples(profile.dataset_length or 0, columns.batch_size)
    rounds, left = np.divmod(steps, np.maximum(1, workers))
    round_s = workers * batch / loader.samples_per_s
    left_rate = loader_rates(profile, np.maximum(1, left), batch, loader.model)
    left_s = np.where(left > 0, left * batch / left_rate, 0.0)
    loader_s = rounds * round_s + left_s
    step_s = epoch / step_rate
    first_s = np.where(rounds > 0, round_s, left_s)
    fill_s = np.maximum(loader_s + batch / step_rate, first_s + step_s) - np.maximum(
        loader_s, step_s
    )
    has_workers = workers > 0
    restart_s = np.where(
        ~columns.persistent_workers, workers * _restart_s_per_worker(profile.loader), 0.0
    )
    return (
        np.where(has_workers, epoch / loader_s, loader.samples_per_s),
        np.where(has_workers, fill_s + restart_s, 0.0),
    )


def _restart_s_per_worker(points: Sequence[LoaderPoint]) -> float:
    """Seconds to start one worker (the median over the measured worker counts; the main
    process starts them one after another)."""
    per_worker = [
        p.restart_s / p.num_workers for p in points if p.num_workers and p.restart_s is not None
    ]
    return float(np.median(per_worker)) if per_worker else 0.0
