"""The infeasibility rule, by its properties: what ran out stays out, and so does anything that
grows it; anything smaller in even one memory-costing setting is measured."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from autotune.search import InfeasibleSet
from autotune.space import Config

configs = st.builds(
    Config,
    batch_size=st.integers(1, 64).map(lambda n: 8 * n),
    num_workers=st.integers(0, 12),
    pin_memory=st.booleans(),
    prefetch_factor=st.none() | st.integers(1, 16),
    persistent_workers=st.booleans(),
    device_prefetch=st.booleans(),
    amp=st.sampled_from(["off", "fp16", "bf16"]),
    channels_last=st.booleans(),
    cudnn_benchmark=st.booleans(),
    tf32=st.booleans(),
    retain_freed_memory=st.booleans(),
).map(Config.normalized)


def _grown(config: Config, draw: Any) -> Config:
    """``config`` with every memory-costing setting kept or raised (and others changed freely)."""
    workers = config.num_workers + draw(st.integers(0, 8))
    ahead = config.prefetch_factor or 2
    return Config(
        batch_size=config.batch_size + 8 * draw(st.integers(0, 16)),
        num_workers=workers,
        prefetch_factor=draw(st.integers(ahead, 16)) if workers else None,
        pin_memory=config.pin_memory or draw(st.booleans()),
        persistent_workers=bool(workers) and (config.persistent_workers or draw(st.booleans())),
        device_prefetch=config.device_prefetch or draw(st.booleans()),
        amp=config.amp,
        channels_last=config.channels_last,
        cudnn_benchmark=draw(st.booleans()),
        tf32=draw(st.booleans()),
        retain_freed_memory=config.retain_freed_memory or draw(st.booleans()),
    )


def _below_in_one_setting(config: Config, failed: Config, draw: Any) -> Config:
    """``config`` with one memory-costing setting put below (or unlike) that of ``failed``."""
    options: list[dict[str, Any]] = [
        {"amp": draw(st.sampled_from([a for a in ("off", "fp16", "bf16") if a != failed.amp]))},
        {"channels_last": not failed.channels_last},
    ]
    if failed.batch_size > 8:
        options.append({"batch_size": draw(st.integers(1, failed.batch_size // 8 - 1)) * 8})
    if failed.num_workers:
        options.append({"num_workers": draw(st.integers(0, failed.num_workers - 1))})
        ahead = failed.prefetch_factor or 2
        if ahead > 1:
            options.append({"prefetch_factor": draw(st.integers(1, ahead - 1))})
    for flag in ("pin_memory", "persistent_workers", "device_prefetch", "retain_freed_memory"):
        if getattr(failed, flag):
            options.append({flag: False})
    return config.model_copy(update=draw(st.sampled_from(options))).normalized()


@given(configs)
def test_a_configuration_that_ran_out_of_memory_is_skipped(failed: Config) -> None:
    infeasible = InfeasibleSet()
    infeasible.add(failed)
    assert infeasible.reason(failed) is not None


@given(configs, st.data())
def test_growing_any_memory_setting_of_a_failure_is_skipped(failed: Config, data: Any) -> None:
    infeasible = InfeasibleSet()
    infeasible.add(failed)
    grown = _grown(failed, data.draw)
    assert infeasible.reason(grown) is not None, f"{grown} needs more than {failed}"


@given(configs, st.data())
def test_smaller_in_one_memory_setting_is_measured(failed: Config, data: Any) -> None:
    # Grow everything, then put one setting below the failure's: it might fit, so it runs.
    infeasible = InfeasibleSet()
    infeasible.add(failed)
    candidate = _below_in_one_setting(_grown(failed, data.draw), failed, data.draw)
    assert infeasible.reason(candidate) is None, f"{candidate} was skipped after {failed}"
