"""Two answers about the batch: the fastest configuration that keeps the effective batch the
user trains with (a drop-in change), and how the fastest overall changes it.

A larger batch changes the optimisation; users ask for their effective batch (micro-batch x
gradient-accumulation steps) not to change silently. Gradient accumulation keeps it with a
smaller micro-batch: ``batch_size x grad_accum_steps`` samples per optimizer step either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from autotune.recommend._runs import CandidateRuns, Confirmation
from autotune.space import Config
from autotune.store import TrialRecord

#: Optimizers whose learning rate is usually scaled with the square root of the batch ratio
#: (adaptive methods); SGD-family ones are scaled linearly (Goyal et al., 2017).
_SQRT_RULE = (
    "adam",
    "adamw",
    "adamax",
    "nadam",
    "radam",
    "adagrad",
    "adadelta",
    "rmsprop",
    "lamb",
    "adafactor",
    "sparseadam",
    "lion",
)
_LINEAR_RULE = ("sgd", "lars", "asgd")


def keeping_effective_batch(
    measured: Sequence[TrialRecord],
    baseline: Config,
    run_samples: int | None = None,
    accumulation_gain: Callable[[Config], float] | None = None,
) -> Config | None:
    """The fastest measured configuration whose batch size divides the baseline's effective
    batch, with the gradient accumulation that restores it; None when none does (or only the
    baseline itself). Ranked by the throughput over the run, compile time included, times
    ``accumulation_gain`` of the configuration with its accumulation where given (the search
    measured each without: accumulating over ``k`` micro-batches pays the optimizer step once
    per ``k``, which gains a smaller batch more)."""
    effective = baseline.effective_batch

    def accumulated(run: TrialRecord) -> Config:
        return run.config.model_copy(
            update={"grad_accum_steps": effective // run.config.batch_size}
        )

    def expected(run: TrialRecord) -> float:
        gain = 1.0 if accumulation_gain is None else accumulation_gain(accumulated(run))
        return (run.samples_per_s_over(run_samples) or 0.0) * gain

    fitting = [
        run
        for run in measured
        if run.usable
        and run.config.grad_accum_steps == 1
        and effective % run.config.batch_size == 0
    ]
    if not fitting:
        return None
    config = accumulated(max(fitting, key=expected))
    return None if config.key() == baseline.key() else config


def same_effective_batch_entry(confirmation: Confirmation) -> CandidateRuns:
    """The fastest re-measured entry that keeps the baseline's effective batch (the baseline
    itself when no candidate does or none beat it; never one that lost a tie-break)."""
    effective = confirmation.baseline.config.effective_batch
    keeping = [
        entry
        for entry in confirmation.candidates
        if entry.usable
        and entry.finished
        and entry.config.effective_batch == effective
        and entry is not confirmation.lost_tie_break
    ]
    best = max(keeping, key=lambda entry: entry.median_run_samples_per_s, default=None)
    base = confirmation.baseline
    if best is None or (
        base.usable and best.median_run_samples_per_s <= base.median_run_samples_per_s
    ):
        return base
    return best


def learning_rate_advice(optimizer: str, ratio: float) -> str:
    """The usual starting point for the learning rate when the batch grows ``ratio`` times."""
    name = optimizer.lower()
    linear, root = f"{ratio:.3g}x", f"{math.sqrt(ratio):.3g}x"
    if name in _LINEAR_RULE:
        return (
            f"{optimizer}: scale the learning rate linearly, by {linear}, with a warm-up; "
            "a starting point to verify on your own loss curve"
        )
    if name in _SQRT_RULE:
        return (
            f"{optimizer}: scale the learning rate by the square root of the batch ratio, "
            f"{root}; a starting point to verify on your own loss curve"
        )
    which = f"the optimizer {optimizer}" if optimizer else "an optimizer autotune cannot name"
    return (
        f"for {which}: linear scaling ({linear}) is the usual rule for SGD, square-root "
        f"({root}) for Adam-family optimizers; a starting point to verify"
    )


def batch_answers(
    confirmation: Confirmation,
    optimizer: str,
    forced: bool,
    metrics: Callable[[CandidateRuns], dict[str, Any]],
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``same_effective_batch`` (the drop-in answer, with ``metrics`` of its confirmation
    runs) and ``batch_change`` (how the fastest overall changes the effective batch; None when
    it keeps it) for the document. ``forced``: the search held the effective batch."""
    winner, base = confirmation.winner, confirmation.baseline
    keep = winner if forced else same_effective_batch_entry(confirmation)
    yours = base.config.effective_batch
    speedup = (
        keep.median_run_samples_per_s / base.median_run_samples_per_s
        if base.usable and base.median_run_samples_per_s
        else None
    )
    same = {
        "effective_batch": keep.config.effective_batch,
        "same_as_recommendation": keep is winner,
        "is_baseline": keep is base,
        "forced": forced,
        "config": keep.config.public_dict(),
        "metrics": metrics(keep),
        "speedup": speedup,
    }
    theirs = winner.config.effective_batch
    if theirs == yours:
        return same, None
    ratio = theirs / yours
    return same, {
        "effective_batch": theirs,
        "baseline_effective_batch": yours,
        "ratio": ratio,
        "optimizer": optimizer or None,
        "learning_rate_advice": learning_rate_advice(optimizer, ratio),
    }


def batch_sentence(
    same: dict[str, Any], change: dict[str, Any] | None, baseline: dict[str, Any]
) -> str:
    """One sentence for the diagnosis: the trade-off between the two answers. ``baseline``:
    the baseline's public config, so the drop-in answer is told by what it changes."""
    if change is None:
        return ""
    yours = change["baseline_effective_batch"]
    text = (
        f" The recommendation trains with an effective batch of "
        f"{change['effective_batch']} ({change['ratio']:.3g}x your {yours}), which changes "
        f"the optimisation: {change['learning_rate_advice']}."
    )
    if same["forced"]:
        return text + " The search held it there (--effective-batch)."
    if same["is_baseline"]:
        return text + f" No configuration measured faster than yours keeps your {yours}."
    changes = ", ".join(
        f"{name}={value}" for name, value in same["config"].items() if baseline.get(name) != value
    )
    speedup = f", {same['speedup']:.2f}x the baseline" if same["speedup"] else ""
    return (
        text + f" The fastest configuration that keeps your {yours} is your baseline with "
        f"{changes}{speedup}: a drop-in change."
    )
