"""The diagnosis: what limits training speed, the numbers that show it, and what to do next.

The knobs fix what settings can fix; the diagnosis names the bottleneck that remains and gives
advice for it, drawn from the usual PyTorch speed checklists, which only a code change can
follow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from autotune.predict import Profile, StepPoint, predict_configs
from autotune.space import Config, DeviceInfo
from autotune.store import TrialRecord

#: Data wait (fraction of the step) from which a configuration counts as input-bound.
INPUT_BOUND_WAIT = 0.3
#: GPU busy fraction below which a compute-bound GPU is held back by the host, not the math.
LOW_DEVICE_UTILIZATION = 0.8

_GIB = 2**30
_FAILURES = {
    "oom": "ran out of memory",
    "nonfinite": "produced a NaN or infinite loss",
    "timeout": "timed out",
    "error": "failed with an error",
    "crashed": "crashed",
    "unsuited": "used a knob's value that its step cannot run with",
}


@dataclass(frozen=True)
class TrialView:
    """What the diagnosis needs to know about one configuration: a trial's record, or the
    medians of a confirmed candidate's runs."""

    config: Config
    outcome: str
    samples_per_s: float | None = None
    data_wait_fraction: float | None = None
    peak_memory_bytes: int | None = None
    device_utilization: float | None = None

    @classmethod
    def of(cls, record: TrialRecord) -> TrialView:
        """The view of one measured trial."""
        return cls(
            config=record.config,
            outcome=record.outcome,
            samples_per_s=record.samples_per_s,
            data_wait_fraction=record.data_wait_fraction,
            peak_memory_bytes=record.peak_memory_bytes,
            device_utilization=record.device_utilization,
        )


def _percent(fraction: float) -> str:
    return f"{fraction:.0%}"


def _loader_settings(config: Config) -> str:
    settings = f"num_workers={config.num_workers}"
    if config.num_workers > 0 and config.prefetch_factor is not None:
        settings += f", prefetch_factor={config.prefetch_factor}"
    if config.pin_memory:
        settings += ", pin_memory=True"
    return settings


@dataclass(frozen=True)
class _Finding:
    verdict: str
    #: Sentences with the numbers behind the verdict, ending in a full stop.
    evidence: str
    advice: list[str]


def _wait_evidence(baseline: TrialView, best: TrialView) -> str:
    """How long the baseline and the recommendation waited for data, as one clause."""
    if best.data_wait_fraction is None:
        return ""
    recommendation = f"the recommendation ({_loader_settings(best.config)})"
    share = _percent(best.data_wait_fraction)
    if best.config.num_workers == 0:
        # Without workers the wait is the main process loading each batch itself.
        waits = f"loads each batch in the main process, {share} of each step"
    elif baseline.data_wait_fraction is None:
        waits = f"spends {share} of each step waiting for data"
    else:
        waits = f"waits {share}"
    if baseline.data_wait_fraction is None:
        return f"{recommendation} {waits}"
    return (
        f"the baseline spent {_percent(baseline.data_wait_fraction)} of each step waiting for "
        f"data with {_loader_settings(baseline.config)}; {recommendation} {waits}"
    )


def _input_bound(baseline: TrialView, best: TrialView, device: DeviceInfo) -> _Finding:
    evidence = (
        f"{_wait_evidence(baseline, best)}, so even after tuning the model sits idle "
        "for a large part of every step."
    )
    advice = [
        "keep inputs compact on the host (images as uint8, token ids as int32 rather than "
        "int64) and convert and normalise them on the device, which shrinks both the workers' "
        "memory and the copy",
        "pre-process offline whatever is the same every epoch (resizing, colour conversion, "
        "tokenisation) instead of repeating it in the loader",
    ]
    if device.is_cuda:
        advice.append(
            "move decoding and augmentation to the GPU (tensor operations on the "
            "device, or NVIDIA DALI), so the CPU workers only read bytes"
        )
    else:
        advice.append(
            "put the dataset in RAM, or on faster local storage, if reading it is the slow part"
        )
    return _Finding("input-bound", evidence, advice)


def _memory_bound(best: TrialView, trials: Sequence[TrialView], device: DeviceInfo) -> _Finding:
    ooms = [trial for trial in trials if trial.outcome == "oom"]
    if ooms:
        smallest = min(trial.config.batch_size for trial in ooms)
        cap = (
            f"{len(ooms)} of {len(trials)} trials ran out of memory (the smallest failing "
            f"batch size was {smallest})"
        )
    else:
        cap = "larger batch sizes exceeded the memory budget"
    evidence = f"the batch size stopped at {best.config.batch_size} because {cap}"
    if best.peak_memory_bytes is not None and device.memory_bytes:
        evidence += (
            f", and the recommendation already peaks at "
            f"{best.peak_memory_bytes / _GIB:.1f} GiB of the device's "
            f"{device.memory_bytes / _GIB:.1f} GiB "
            f"({_percent(best.peak_memory_bytes / device.memory_bytes)})"
        )
    advice = [
        "use gradient checkpointing (torch.utils.checkpoint) on the deepest blocks, which "
        "recomputes activations in the backward pass instead of storing them"
    ]
    if best.config.amp == "off":
        advice.append(
            "enable mixed precision (bf16 where the hardware has it), which roughly "
            "halves activation memory"
        )
    advice.append(
        "if the optimiser needs a larger batch than fits, accumulate gradients over "
        "several micro-batches (--effective-batch) instead of growing the batch"
    )
    return _Finding("memory-bound", evidence + ".", advice)


def _compute_bound(
    baseline: TrialView, best: TrialView, device: DeviceInfo, profile: Profile | None
) -> _Finding:
    waits = _wait_evidence(baseline, best)
    was_input_bound = (
        baseline.data_wait_fraction is not None and baseline.data_wait_fraction >= INPUT_BOUND_WAIT
    )
    if was_input_bound:
        evidence = (
            f"{waits}, so the loader now keeps up (the baseline was input-bound) and "
            "the model's own work sets the pace"
        )
    elif waits and best.config.num_workers == 0 and best.data_wait_fraction:
        evidence = f"{waits}, and spends the rest in the model's own work"
    elif waits:
        evidence = f"{waits}, so the time goes to the model's own work"
    else:
        evidence = "the time goes to the model's own work"
    utilization = best.device_utilization
    if device.is_cuda and utilization is not None:
        evidence += f", and the GPU was busy {_percent(utilization)} of the measured window"
    evidence += "."
    advice: list[str]
    if not device.is_cuda:
        advice = []
        lost = _mixed_precision_lost(profile)
        if best.config.amp == "off" and lost is not None:
            advice.append(f"mixed precision does not pay for this model here: {lost}")
        elif best.config.amp == "off" and not device.bf16_native:
            advice.append(
                "do not expect mixed precision to help: this CPU has no bf16 instructions "
                "(neither the amx_bf16 nor the avx512_bf16 CPU flag), so bf16 is emulated"
            )
        advice += [
            "try torch.compile, which fuses the many small element-wise operations "
            "that add up on a CPU",
            "beyond that, the large gains are a smaller or pruned model, or a GPU",
        ]
    elif utilization is not None and utilization < LOW_DEVICE_UTILIZATION:
        advice = [
            "remove host synchronisations from the step (loss.item(), .cpu(), printing "
            "tensors), or do them every N steps, since each one drains the GPU's queue",
            "try torch.compile or CUDA graphs to cut the launch overhead of many small kernels",
            "if the optimiser allows, a larger batch gives the GPU more work per launch",
        ]
    else:
        advice = [
            "try torch.compile to fuse element-wise operations",
            "keep layer widths and sequence lengths multiples of 8, which tensor cores "
            "need to run mixed precision at full speed",
            "beyond that, the gains are in the model (fewer or cheaper layers) or in "
            "more GPUs with DistributedDataParallel",
        ]
    return _Finding("compute-bound", evidence, advice)


def _throughput(baseline: TrialView, best: TrialView) -> str:
    if best.samples_per_s is None:
        return ""
    if baseline.samples_per_s:
        speedup = best.samples_per_s / baseline.samples_per_s
        return (
            f" Throughput goes from {baseline.samples_per_s:,.0f} to "
            f"{best.samples_per_s:,.0f} samples/s ({speedup:.2f}x)."
        )
    failure = _FAILURES.get(baseline.outcome, f"did not finish ({baseline.outcome})")
    return (
        f" The baseline {failure}; the recommendation trains at "
        f"{best.samples_per_s:,.0f} samples/s."
    )


def _precision(amp: str) -> str:
    return "fp32" if amp == "off" else amp


def ceiling_numbers(profile: Profile) -> str | None:
    """The two bounds in numbers: "the step alone reaches X samples/s at batch B in bf16; the
    loader at best Y samples/s with N workers at batch b" (the batch the loader was timed at,
    and its rates at the larger batch and with more batches ahead it was timed at too); None
    when the profile measured neither."""
    step, loader = profile.best_step(), profile.best_loader()
    if step is None or loader is None:
        return None
    layout = ", channels_last" if step.channels_last else ""
    large = profile.loader_large_batch
    timed_again = []
    if large is not None:
        timed_again.append(
            f"{large.samples_per_s:,.0f} at batch "
            f"{profile.loader_large_batch_size} with {_workers(large.num_workers)}"
        )
    ahead = profile.loader_prefetch
    if ahead is not None:
        one = profile.loader_one_ahead
        timed_again.append(
            f"{ahead.samples_per_s:,.0f} with {_workers(ahead.num_workers)} "
            f"{ahead.prefetch_factor} batches ahead each"
            + (f", {one.samples_per_s:,.0f} with one" if one is not None else "")
        )
    again = f" ({'; '.join(timed_again)})" if timed_again else ""
    return (
        f"the step alone reaches {step.samples_per_s:,.0f} samples/s at batch "
        f"{step.batch_size} in {_precision(step.amp)}{layout}; the loader at best "
        f"{loader.samples_per_s:,.0f} samples/s with {_workers(loader.num_workers)} at "
        f"batch {profile.loader_batch_size}{again}"
        + (f", each of {profile.ranks} ranks" if profile.ranks > 1 else "")
    )


def _workers(count: int) -> str:
    return f"{count} worker{'s' if count != 1 else ''}"


#: A step is dominated by its fixed cost per step (on a GPU: launching kernels while the
#: device waits) when its time grows by less than :data:`FIXED_COST_GROWTH` from a batch at
#: least :data:`FIXED_COST_BATCHES` times smaller, as a small model's step on a fast GPU does
#: (evidence: ``benchmarks/log/``).
FIXED_COST_GROWTH = 1.5
FIXED_COST_BATCHES = 8


def _fixed_cost_evidence(profile: Profile, step: StepPoint) -> str | None:
    """ "X ms at batch b, Y ms at B" when the step's time hardly grows with its batch."""
    ran = [p for p in profile.step_points(step.amp, step.channels_last) if p.samples_per_s]
    smaller = [p for p in ran if p.batch_size * FIXED_COST_BATCHES <= step.batch_size]
    if not smaller or not step.samples_per_s:
        return None
    small = smaller[0]
    small_ms = 1e3 * small.batch_size / (small.samples_per_s or 1.0)
    step_ms = 1e3 * step.batch_size / step.samples_per_s
    if step_ms >= FIXED_COST_GROWTH * small_ms:
        return None
    return f"{small_ms:.1f} ms at batch {small.batch_size}, {step_ms:.1f} ms at {step.batch_size}"


def _mixed_precision_lost(profile: Profile | None) -> str | None:
    """ "X samples/s at best in bf16 against Y in fp32" when the profile stepped in a reduced
    precision and fp32 stayed the fastest; None when it did not measure one, or one won."""
    curves = profile.step_curves() if profile is not None else []
    best = max(curves, key=lambda p: p.samples_per_s or 0.0, default=None)
    reduced = [p for p in curves if p.amp != "off"]
    if best is None or best.amp != "off" or not reduced:
        return None
    fastest = max(reduced, key=lambda p: p.samples_per_s or 0.0)
    return (
        f"the step alone reached at best {fastest.samples_per_s:,.0f} samples/s in "
        f"{fastest.amp} against {best.samples_per_s:,.0f} in fp32"
    )


def _raise_ceiling(profile: Profile, loader_bounds: bool) -> str:
    """What would lift the lower of the two bounds (the loader's where ``loader_bounds``)."""
    step, loader = profile.best_step(), profile.best_loader()
    assert step is not None and loader is not None
    if loader_bounds:
        cores_busy = loader.samples_per_s * loader.cpu_s_per_sample
        if cores_busy >= 0.8 * profile.cpu_count:
            return (
                f"the loader bounds it and keeps {cores_busy:.1f} of {profile.cpu_count} "
                "cores busy: more CPU cores, or a cheaper input pipeline, would raise it"
            )
        return (
            f"the loader bounds it with {cores_busy:.1f} of {profile.cpu_count} cores busy, "
            "so it waits on storage or on passing batches between processes: faster "
            "storage, more workers than were tried, or fewer, larger reads would raise it"
        )
    largest = max((p.batch_size for p in profile.step if p.amp == step.amp), default=0)
    fixed = _fixed_cost_evidence(profile, step)
    if profile.device_type == "cuda" and fixed is not None:
        return (
            f"the step bounds it, and its time hardly grows with the batch ({fixed}): "
            "fixed costs per step, kernel launches above all, dominate, so a larger batch, "
            "CUDA graphs (torch.compile's max-autotune captures them) or fused kernels "
            "would raise it"
        )
    advice = []
    if step.amp == "off" and _mixed_precision_lost(profile) is None:
        advice.append("mixed precision (where the hardware runs it natively)")
    if step.batch_size >= largest and not any(p.out_of_memory for p in profile.step):
        advice.append("a batch larger than the largest tried")
    advice.append("a cheaper model or torch.compile")
    return "the step bounds it: " + ", ".join(advice) + " would raise it"


#: A recommendation measured this much above the lower of its predicted bounds says so: the
#: profile missed something (a loader timed at one batch size, a busy machine).
ABOVE_THE_CEILING = 1.1


def ceiling_sentence(
    profile: Profile, best: TrialView, trials: Sequence[TrialView] = ()
) -> str | None:
    """The ceiling in numbers, the recommendation's share of it, and what would raise it.

    The share compares like with like: the two bounds at the recommendation's own batch size,
    precision, layout and workers, as the profile predicts them (the loader was timed at one
    batch size; its rate at another is scaled by the predictor's model of a batch's fixed and
    per-sample costs), since a loader timed at a small batch can read at half the rate a
    recommendation at a large one trains at (evidence: ``benchmarks/log/``).
    """
    numbers = ceiling_numbers(profile)
    if numbers is None:
        return None
    at = predict_configs(profile, [best.config])
    step_at, loader_at = float(at.step_samples_per_s[0]), float(at.loader_samples_per_s[0])
    in_turn = best.config.num_workers == 0
    # Workers load beside the step: the slower of the two sets the pace. Without workers the
    # main process loads each batch, then steps on it: their times add.
    bound = (
        1.0 / (1.0 / step_at + 1.0 / loader_at)
        if in_turn and step_at > 0 < loader_at
        else min(step_at, loader_at)
    )
    share = ""
    if best.samples_per_s is not None and bound > 0:
        loader = (
            f"with {_workers(best.config.num_workers)}"
            if best.config.num_workers
            else "in the main process"
        )
        above = (
            ": the profile underestimates this configuration"
            if best.samples_per_s > ABOVE_THE_CEILING * bound
            else ""
        )
        of = (
            f"of the {bound:,.0f} they reach in turn (without workers the main process "
            "loads each batch, then steps on it)"
            if in_turn
            else "of the lower"
        )
        share = (
            f". At the recommendation's batch {best.config.batch_size} the profile "
            f"predicts the step, taking in each batch, at {step_at:,.0f} samples/s and "
            f"the loader {loader} at {loader_at:,.0f}; the recommendation reaches "
            f"{best.samples_per_s:,.0f} samples/s = {best.samples_per_s / bound:.0%} "
            f"{of}{above}"
        )
    advice = _raise_ceiling(profile, loader_bounds=loader_at < step_at)
    if in_turn and math.isfinite(loader_at) and loader_at > 0 < step_at:
        advice += (
            f"; loading in the main process takes {step_at / (step_at + loader_at):.0%} "
            "of each step" + _with_workers(trials, best, profile.device_type == "cpu")
        )
    return f"Ceiling: {numbers}{share}. {advice[0].upper()}{advice[1:]}."


def _with_workers(trials: Sequence[TrialView], best: TrialView, on_cpu: bool) -> str:
    """What loader workers did for a recommendation without them: the fastest configuration
    the search measured with workers, or that workers would take the loading off the training
    thread where it measured none."""
    measured = [
        t for t in trials if t.config.num_workers > 0 and t.outcome == "ok" and t.samples_per_s
    ]
    if not measured:
        return (
            ": DataLoader workers would take it off the training thread, where there are "
            "cores to spare for them"
        )
    fastest = max(measured, key=lambda t: t.samples_per_s or 0.0)
    rate = fastest.samples_per_s or 0.0
    verdict = (
        ", and workers did not win it back here"
        if best.samples_per_s is not None and rate < best.samples_per_s
        else ""
    )
    return (
        f"{verdict}: the fastest configuration the search measured with workers "
        f"({_loader_settings(fastest.config)}, batch {fastest.config.batch_size}) trained "
        f"at {rate:,.0f} samples/s in one run"
        + (", its workers sharing the cores with the step" if on_cpu else "")
    )


def diagnose(
    baseline: TrialView,
    best: TrialView,
    trials: Sequence[TrialView],
    device: DeviceInfo,
    memory_limited: bool,
    profile: Profile | None = None,
) -> str:
    """A paragraph naming the bottleneck (input-, compute- or memory-bound) with its numbers,
    then one to three pieces of advice that need a code change rather than a setting.

    ``memory_limited`` is True when the best batch size was capped by running out of memory
    or by the memory budget; the verdict is then memory-bound whatever the other numbers say.
    Otherwise it is input-bound when the recommendation still waits for data at least
    :data:`INPUT_BOUND_WAIT` of each step, and compute-bound when it does not. With the job's
    ``profile``, a sentence gives the ceiling it measured (the step alone, the loader alone),
    the recommendation's share of it and what would raise it.

    Example:
        >>> cpu = DeviceInfo(type="cpu", name="cpu", memory_bytes=2**34)
        >>> base = TrialView(Config(), "ok", samples_per_s=100.0, data_wait_fraction=0.72)
        >>> best = TrialView(Config(num_workers=4), "ok", samples_per_s=300.0,
        ...                  data_wait_fraction=0.04)
        >>> diagnose(base, best, [base, best], cpu, memory_limited=False)[:60]
        'Verdict: compute-bound. The baseline spent 72% of each step '
    """
    if memory_limited:
        finding = _memory_bound(best, trials, device)
    elif best.data_wait_fraction is not None and best.data_wait_fraction >= INPUT_BOUND_WAIT:
        finding = _input_bound(baseline, best, device)
    else:
        finding = _compute_bound(baseline, best, device, profile)
    evidence = finding.evidence[0].upper() + finding.evidence[1:]
    advice = " What the settings cannot fix: " + "; ".join(finding.advice[:3]) + "."
    ceiling = ceiling_sentence(profile, best, trials) if profile is not None else None
    ceiling_text = f" {ceiling}" if ceiling else ""
    return (
        f"Verdict: {finding.verdict}. {evidence}{_throughput(baseline, best)}{ceiling_text}{advice}"
    )
