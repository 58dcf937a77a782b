"""The one record of a measured trial: the runner produces it, the store persists it, the
recommendation and the API read it.

Every field but ``config`` is a column of :class:`autotune.store.Trial` with the same name, so
adding a measured value is a field here plus its column there (a test checks the two agree).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field

from autotune.space import Config
from autotune.store._models import Outcome, utcnow


def throughput_over_run(
    samples_per_s: float, compile_s: float | None, run_samples: int | None
) -> float:
    """Samples per second over a whole run of ``run_samples`` samples that first spends
    ``compile_s`` seconds compiling: ``run_samples / (run_samples / samples_per_s + compile_s)``.

    Without compile time, or without a known run length, it is ``samples_per_s``.

    Example:
        >>> throughput_over_run(1000.0, 10.0, 10_000)  # 10 s of training after 10 s compiling
        500.0
    """
    if not compile_s or not run_samples or samples_per_s <= 0:
        return samples_per_s
    return run_samples / (run_samples / samples_per_s + compile_s)


class TrialRecord(BaseModel):
    """One configuration measured once, in its own process, and how that ended."""

    model_config = ConfigDict(from_attributes=True)

    config: Config
    outcome: Outcome
    #: Stopped early by the pruner because it was clearly slower than the best so far.
    pruned: bool = False
    #: Pruned before its timed window began: its warm-up rate was already far below the best.
    pruned_during_warmup: bool = False
    #: False when its peak memory exceeded the job's memory budget; None without a budget.
    within_budget: bool | None = None

    # Measured inside the trial process, over the timed window (the child's window metrics).
    samples_per_s: float | None = None
    step_time_median_ms: float | None = None
    step_time_p90_ms: float | None = None
    data_wait_fraction: float | None = None
    copy_wait_fraction: float | None = None
    epoch_restart_s: float | None = None
    steps_per_epoch: int | None = None
    steps: int | None = None
    warmup_steps: int | None = None
    window_s: float | None = None
    losses_finite: bool | None = None
    peak_memory_allocated_bytes: int | None = None
    peak_memory_reserved_bytes: int | None = None
    #: Seconds torch.compile added to the steps that compiled (None: not compiled); never part
    #: of ``samples_per_s``, charged against a run's length by :meth:`samples_per_s_over`.
    compile_s: float | None = None

    #: What the job's profile predicted for this configuration, before it ran.
    predicted_samples_per_s: float | None = None
    #: The median measured / predicted of the job's trials before this one (other
    #: configurations, the same handling of freed memory): the job's prediction of this trial
    #: is ``predicted_samples_per_s`` times this. None before any, and where the configuration
    #: sets a knob the profile does not time (compile, TF32, ...).
    prediction_scale: float | None = None

    # Measured from outside, by the parent process.
    peak_host_memory_bytes: int | None = None
    device_utilization: float | None = None

    error: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    fingerprint: dict[str, Any] | None = None
    started_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime | None = None
    duration_s: float | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def peak_memory_bytes(self) -> int | None:
        """Peak memory of the device: reserved CUDA memory, or host memory on a CPU."""
        if self.peak_memory_reserved_bytes is not None:
            return self.peak_memory_reserved_bytes
        return self.peak_host_memory_bytes

    @property
    def usable(self) -> bool:
        """Whether this trial may be recommended: finished ok, finite, within the budget."""
        return (
            self.outcome == "ok"
            and not self.pruned
            and self.losses_finite is not False
            and self.within_budget is not False
            and self.samples_per_s is not None
        )

    def samples_per_s_over(self, run_samples: int | None) -> float | None:
        """Throughput over a run of ``run_samples`` samples, compile time included (see
        :func:`throughput_over_run`); ``samples_per_s`` stays the steady state."""
        if self.samples_per_s is None:
            return None
        return throughput_over_run(self.samples_per_s, self.compile_s, run_samples)

    @property
    def ran_out_of_memory(self) -> bool:
        return self.outcome == "oom" or self.within_budget is False

    def columns(self) -> dict[str, Any]:
        """The values of this record's columns of a ``Trial`` row."""
        values = self.model_dump(exclude={"config"})
        values.update(config=self.config.public_dict(), config_key=self.config.key())
        return values
