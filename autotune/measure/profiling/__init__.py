"""Profiling: measuring the step alone and the loader alone, once per job, inside one trial.

The measured :class:`~autotune.predict.Profile` is the predictor's data model; this package is
the code that measures it, one module per part, run in this order by :func:`profile`:

- **Fresh heap** (:mod:`._host`; a CPU with glibc, where the space holds glibc's default
  handling of freed memory): the step at the workload's batch in the heap a fresh trial starts
  with, then retaining freed memory, which the rest of the profile keeps; and on a CPU where
  workers start anew each epoch, what a fork costs the next step.
- **Step alone** (:mod:`._step`, :mod:`._step_doubt`, :mod:`._bench`): a few real batches
  read once, put on the device and cycled, so the step is timed without waiting for data; batch
  sizes in ascending order per precision and layout, up to the first that does not fit, swept
  twice (on a CPU the second sweep only where the first casts doubt). Then the space's other
  intra-op thread counts (:mod:`._threads`) and, where the space accumulates gradients, the
  optimizer step and a backward adding into kept gradients (:mod:`._accumulation`), and the
  step with each optimizer implementation the space searches against the default's
  (:mod:`._optimizer`).
- **Loader alone** (:mod:`._loader`, :mod:`._loader_followup`): the DataLoader built as a
  trial builds it, its batches only pulled, for a rising number of workers, beyond the grid
  while it keeps scaling; then a larger batch and more batches ahead.
- **Compile** (:mod:`._compile`, last): ``torch.compile`` in each mode the space searches,
  once at the workload's batch with empty caches, within the share of the job's time one
  compile may take: its seconds, and its step against the eager step timed beside it.

In a job of several ranks the profile runs as those ranks (:mod:`._lockstep`): rank 0 measures
and records one rank's rates, the others run its step and loader sweeps beside it
(:mod:`._follow`).

Each part has its own time budget (:class:`ProfilePlan`); a point the budget leaves out is
predicted from its neighbours, with more uncertainty.
"""

from autotune.measure.profiling._follow import follow
from autotune.measure.profiling._lockstep import start_conducting
from autotune.measure.profiling._orchestration import profile
from autotune.measure.profiling._plan import ProfilePlan

__all__ = ["ProfilePlan", "follow", "profile", "start_conducting"]
