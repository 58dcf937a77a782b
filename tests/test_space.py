"""The search space: which knobs apply where, --fix/--range/--baseline values, size, seeds."""

from __future__ import annotations

import itertools
from typing import Any

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from autotune.errors import ConfigError
from autotune.search import config_from_params, params_of, suggest_config
from autotune.space import (
    KNOBS,
    Config,
    DeviceInfo,
    SearchSpace,
    WorkloadInfo,
    amp_modes,
    check_knob_settings,
    coerce_knob_value,
    default_max_workers,
    parse_assignments,
)

CPU = DeviceInfo(type="cpu", name="test cpu", memory_bytes=16 * 2**30, cpu_count=2)
CPU_BF16 = DeviceInfo(
    type="cpu", name="test cpu", memory_bytes=16 * 2**30, cpu_count=2, bf16_supported=True
)
AMPERE = DeviceInfo(
    type="cuda",
    name="test A100",
    memory_bytes=80 * 2**30,
    index=0,
    bf16_supported=True,
    bf16_native=True,
    compute_capability=(8, 0),
    cpu_count=8,
    compile_unavailable=None,
)
VOLTA = DeviceInfo(
    type="cuda",
    name="test V100",
    memory_bytes=16 * 2**30,
    index=0,
    bf16_supported=False,
    compute_capability=(7, 0),
    cpu_count=8,
    compile_unavailable=None,
)
IMAGES = WorkloadInfo(name="images", dataset_length=50_000, input_batch_ndim=4, batch_size=32)
TOKENS = WorkloadInfo(name="tokens", dataset_length=50_000, input_batch_ndim=2, batch_size=32)

CUDA_ONLY = ("pin_memory", "device_prefetch", "cudnn_benchmark", "tf32")


def enumerate_keys(space: SearchSpace) -> set[str]:
    """Every distinct configuration of ``space``, by brute force over all value combinations."""
    names = list(space.choices)
    keys = set()
    for combo in itertools.product(*(space.choices[n] for n in names)):
        keys.add(space.config_from(dict(zip(names, combo, strict=True))).key())
    return keys


# -- applicability ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", CUDA_ONLY)
def test_cuda_only_knobs_are_not_searched_on_cpu(name: str) -> None:
    space = SearchSpace(CPU, IMAGES)
    assert name not in space.searched
    assert name not in space.fixed
    assert space.choices[name] == (KNOBS[name].default,)
    assert "CUDA" in space.not_applicable[name]
    assert space.describe()["not_applicable"][name] == space.not_applicable[name]
    assert getattr(space.checklist(), name) is KNOBS[name].default


@pytest.mark.parametrize("name", CUDA_ONLY)
def test_cuda_knobs_are_searched_on_ampere(name: str) -> None:
    space = SearchSpace(AMPERE, IMAGES)
    assert space.searched[name] == KNOBS[name].values
    # CPU-only, and the step knobs these descriptions lack the probe's facts for
    assert set(space.not_applicable) == {
        "retain_freed_memory",
        "intra_op_threads",
        "optimizer_impl",
        "in_order",
    }
    assert getattr(space.checklist(), name) is True


def test_the_steps_threads_are_searched_on_a_cpu_with_cores_to_share() -> None:
    space = SearchSpace(CPU, TOKENS)
    assert space.searched["intra_op_threads"] == (None, 1)
    assert space.baseline().intra_op_threads is None  # PyTorch's default, as users run
    assert space.checklist().intra_op_threads is None
    single = SearchSpace(CPU.model_copy(update={"cpu_count": 1}), TOKENS)
    assert "two cores" in single.not_applicable["intra_op_threads"]
    assert "CPU device" in SearchSpace(AMPERE, TOKENS).not_applicable["intra_op_threads"]
    with pytest.raises(ConfigError, match="--fix intra_op_threads=1: intra_op_threads only"):
        SearchSpace(AMPERE, TOKENS, fixed={"intra_op_threads": "1"})


def test_intra_op_thread_counts_are_written_as_numbers_or_null() -> None:
    space = SearchSpace(CPU, TOKENS, ranges={"intra_op_threads": "null,1,4"})
    assert space.searched["intra_op_threads"] == (None, 1, 4)
    assert SearchSpace(CPU, TOKENS, fixed={"intra_op_threads": "1"}).fixed["intra_op_threads"] == 1
    with pytest.raises(ConfigError, match="intra_op_threads 0 is not positive; use 1 or more"):
        coerce_knob_value("intra_op_threads", "0")
    with pytest.raises(ConfigError, match="takes a whole number"):
        coerce_knob_value("intra_op_threads", "many")


def test_tf32_needs_compute_capability_8() -> None:
    space = SearchSpace(VOLTA, IMAGES)
    assert "tf32" not in space.searched
    assert "8.0" in space.not_applicable["tf32"]
    assert set(space.not_applicable) == {
        "tf32",
        "retain_freed_memory",
        "intra_op_threads",
        "optimizer_impl",
        "in_order",
    }
    for name in ("pin_memory", "device_prefetch", "cudnn_benchmark"):
        assert space.searched[name] == (False, True)


@pytest.mark.parametrize(
    ("device", "modes"),
    [
        (CPU, ("off",)),
        (CPU_BF16, ("off", "bf16")),
        (AMPERE, ("off", "fp16", "bf16")),
        (VOLTA, ("off", "fp16")),
    ],
)
def test_amp_choices_depend_on_the_device(device: DeviceInfo, modes: tuple[str, ...]) -> None:
    assert amp_modes(device) == modes
    assert SearchSpace(device, IMAGES).choices["amp"] == modes


@pytest.mark.parametrize(("device", "amp"), [(CPU, "fp16"), (CPU_BF16, "fp16"), (VOLTA, "bf16")])
def test_fixing_amp_the_device_cannot_run_is_refused(device: DeviceInfo, amp: str) -> None:
    with pytest.raises(ConfigError, match=f"amp={amp}"):
        SearchSpace(device, IMAGES, fixed={"amp": amp})


def test_fixing_amp_to_a_supported_mode() -> None:
    space = SearchSpace(CPU_BF16, IMAGES, fixed={"amp": "BF16"})
    assert space.fixed["amp"] == "bf16"
    assert "amp" not in space.searched
    assert space.baseline().amp == "bf16"
    assert space.checklist().amp == "bf16"


def test_amp_checklist_on_cpu_and_cuda() -> None:
    # Emulated bf16 on a CPU is slower: the checklist keeps fp32 unless bf16 is native.
    assert SearchSpace(CPU_BF16, IMAGES).checklist().amp == "off"
    native = CPU_BF16.model_copy(update={"bf16_native": True})
    assert SearchSpace(native, IMAGES).checklist().amp == "bf16"
    assert SearchSpace(AMPERE, IMAGES).checklist().amp == "bf16"
    assert SearchSpace(VOLTA, IMAGES).checklist().amp == "fp16"


def test_channels_last_only_for_4d_inputs() -> None:
    assert SearchSpace(CPU, IMAGES).searched["channels_last"] == (False, True)
    space = SearchSpace(CPU, TOKENS)
    assert "channels_last" not in space.searched
    assert "4-D" in space.not_applicable["channels_last"]
    assert space.checklist().channels_last is False


def test_fixing_a_not_applicable_knob_to_its_default_is_allowed() -> None:
    space = SearchSpace(CPU, TOKENS, fixed={"pin_memory": "false", "channels_last": False})
    assert space.choices["pin_memory"] == (False,)
    assert "pin_memory" in space.not_applicable
    assert "pin_memory" not in space.fixed


@pytest.mark.parametrize(
    ("device", "workload", "name", "value"),
    [
        (CPU, IMAGES, "pin_memory", "true"),
        (CPU, IMAGES, "device_prefetch", True),
        (CPU, IMAGES, "cudnn_benchmark", "on"),
        (VOLTA, IMAGES, "tf32", "yes"),
        (AMPERE, TOKENS, "channels_last", "1"),
    ],
)
def test_fixing_a_not_applicable_knob_to_another_value_is_refused(
    device: DeviceInfo, workload: WorkloadInfo, name: str, value: Any
) -> None:
    with pytest.raises(ConfigError, match=f"--fix {name}=True: {name} ") as info:
        SearchSpace(device, workload, fixed={name: value})
    assert SearchSpace(device, workload).not_applicable[name] in str(info.value)


# -- workers and the conditional space -------------------------------------------------------


def test_prefetch_and_persistence_mean_nothing_without_workers() -> None:
    plain = Config(batch_size=64)
    dressed = Config(batch_size=64, prefetch_factor=4, persistent_workers=True)
    assert dressed.normalized() == plain
    assert dressed.key() == plain.key()
    assert dressed.public_dict()["prefetch_factor"] is None
    with_workers = Config(batch_size=64, num_workers=2, prefetch_factor=4)
    assert with_workers.normalized() == with_workers
    assert with_workers.key() != Config(batch_size=64, num_workers=2).key()
    assert with_workers.key() != Config(batch_size=64, num_workers=2, prefetch_factor=8).key()


def test_config_from_drops_worker_settings_without_workers() -> None:
    space = SearchSpace(CPU, TOKENS)
    config = space.config_from({"num_workers": 0, "prefetch_factor": 8, "persistent_workers": True})
    assert config.prefetch_factor is None
    assert config.persistent_workers is False
    config = space.config_from({"num_workers": 2, "prefetch_factor": 8, "persistent_workers": True})
    assert (config.prefetch_factor, config.persistent_workers) == (8, True)


SMALL_SPACES = {
    "workers-and-none": dict(ranges={"batch_size": "8,16", "num_workers": "0,2,4"}),
    "no-zero-workers": dict(
        ranges={"batch_size": "8,16", "num_workers": "2,4", "prefetch_factor": "1,2"}
    ),
    "only-zero-workers": dict(ranges={"batch_size": "8,16,32", "num_workers": "0"}),
    "fixed-prefetch": dict(
        ranges={"batch_size": "8", "num_workers": "0,1"}, fixed={"prefetch_factor": "null"}
    ),
}


@pytest.mark.parametrize("kwargs", SMALL_SPACES.values(), ids=SMALL_SPACES.keys())
@pytest.mark.parametrize("workload", [TOKENS, IMAGES], ids=["2d", "4d"])
def test_size_counts_the_conditional_space(kwargs: dict[str, Any], workload: WorkloadInfo) -> None:
    space = SearchSpace(CPU_BF16, workload, **kwargs)
    keys = enumerate_keys(space)
    assert space.size() == len(keys)
    assert space.describe()["size"] == len(keys)


def test_size_by_hand() -> None:
    # batch 2 x amp 2 x threads 2 x (workers 0: 1 + workers 2: prefetch 5 x persistent 2) = 88
    space = SearchSpace(CPU_BF16, TOKENS, ranges={"batch_size": "8,16", "num_workers": "0,2"})
    assert space.size() == 2 * 2 * 2 * (1 + 5 * 2)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.parametrize("ordinal", [True, False])
def test_suggest_covers_exactly_the_enumerated_space(ordinal: bool) -> None:
    space = SearchSpace(
        CPU_BF16,
        IMAGES,
        ranges={"batch_size": "8,16", "num_workers": "0,2", "prefetch_factor": "2,4"},
    )
    expected = enumerate_keys(space)
    assert space.size() == len(expected) == 2 * 2 * 2 * 2 * (1 + 2 * 2)
    seen: list[str] = []

    def objective(trial: optuna.Trial) -> float:
        config = suggest_config(space, trial, ordinal)
        assert space.contains(config)
        assert config_from_params(space, params_of(space, config, ordinal)) == config
        seen.append(config.key())
        return 0.0

    study = optuna.create_study(sampler=optuna.samplers.BruteForceSampler(seed=0))
    study.optimize(objective, n_trials=3 * len(expected))
    assert len(seen) == len(set(seen)) == len(expected)
    assert set(seen) == expected
    names = {name for trial in study.trials for name in trial.params}
    assert ("batch_size_index" in names) is ordinal and ("batch_size" in names) is not ordinal


# -- ordered knobs as indices ----------------------------------------------------------------


def test_ordered_knobs_index_their_own_values_ascending() -> None:
    # Values beyond the global grid (as a profile may add) and in any order given.
    space = SearchSpace(
        CPU, TOKENS, ranges={"num_workers": "24,0,5,48,2", "batch_size": "256,64,128"}
    )
    assert space.ordered_values("num_workers") == (0, 2, 5, 24, 48)
    assert space.ordered_values("batch_size") == (64, 128, 256)
    assert space.ordered_values("amp") is None and space.ordered_values("pin_memory") is None
    config = Config(batch_size=128, num_workers=24, prefetch_factor=4)
    params = params_of(space, config)
    assert params["num_workers_index"] == 3 and params["batch_size_index"] == 1
    assert params["prefetch_factor_index"] == KNOBS["prefetch_factor"].values.index(4)
    assert config_from_params(space, params) == config.normalized()
    # A study written before ordered knobs names the values themselves.
    assert (
        config_from_params(space, {"batch_size": 128, "num_workers": 24, "prefetch_factor": 4})
        == config.normalized()
    )


def test_an_index_outside_the_space_is_refused_in_one_sentence() -> None:
    space = SearchSpace(CPU, TOKENS, ranges={"batch_size": "64,128"})
    with pytest.raises(ConfigError, match=r"batch_size_index=5 lies outside this job's 2 values"):
        config_from_params(space, {"batch_size_index": 5})


_SMALL = st.fixed_dictionaries(
    {
        "device": st.sampled_from([CPU, CPU_BF16, AMPERE]),
        "workload": st.sampled_from([IMAGES, TOKENS]),
        "batch_size": st.lists(
            st.sampled_from([8, 16, 24, 64, 96, 256, 512]), min_size=1, max_size=4, unique=True
        ),
        "num_workers": st.lists(
            st.sampled_from([0, 1, 3, 5, 8, 24, 40]), min_size=1, max_size=3, unique=True
        ),
        "prefetch_factor": st.lists(
            st.sampled_from(["null", 1, 2, 3, 16]), min_size=1, max_size=3, unique=True
        ),
    }
)


@settings(max_examples=60, deadline=None)
@given(_SMALL)
def test_every_configuration_round_trips_through_its_params(drawn: dict[str, Any]) -> None:
    fixed = (
        {"cudnn_benchmark": True, "tf32": True, "pin_memory": True}
        if drawn["device"].is_cuda
        else {}
    )
    ranges = {
        name: ",".join(map(str, drawn[name]))
        for name in ("batch_size", "num_workers", "prefetch_factor")
    }
    space = SearchSpace(drawn["device"], drawn["workload"], fixed=fixed, ranges=ranges)
    configs = list(space.all_configs())
    assert len(configs) == len({c.key() for c in configs}) == space.size()
    for config in configs:
        # With workers, "null" (unset) and 2 are one setting: the space holds it either way.
        assert space.contains(config)
        for ordinal in (True, False):
            params = params_of(space, config, ordinal)
            assert config_from_params(space, params) == config
            # What suggest asks for, answered with these params, is the same configuration.
            assert suggest_config(space, optuna.trial.FixedTrial(params), ordinal) == config


# -- --fix values ----------------------------------------------------------------------------


@pytest.mark.parametrize("word", ["true", "True", "YES", "on", "1", " yes ", True])
def test_bool_true_words(word: Any) -> None:
    assert coerce_knob_value("persistent_workers", word) is True


@pytest.mark.parametrize("word", ["false", "FALSE", "no", "Off", "0", False])
def test_bool_false_words(word: Any) -> None:
    assert coerce_knob_value("pin_memory", word) is False


@pytest.mark.parametrize("word", ["maybe", "2", "", 1])
def test_bool_rejects_other_words(word: Any) -> None:
    with pytest.raises(ConfigError, match="takes true or false"):
        coerce_knob_value("channels_last", word)


@pytest.mark.parametrize("word", ["null", "None", "DEFAULT", None])
def test_null_prefetch(word: Any) -> None:
    assert coerce_knob_value("prefetch_factor", word) is None


def test_numeric_values() -> None:
    assert coerce_knob_value("prefetch_factor", "4") == 4
    assert coerce_knob_value("num_workers", " 12 ") == 12
    assert coerce_knob_value("batch_size", 64) == 64
    assert coerce_knob_value("batch_size", 64.0) == 64
    for name, raw, message in [
        ("prefetch_factor", "0", "1..16"),
        ("prefetch_factor", "17", "1..16"),
        ("num_workers", "-1", "negative"),
        ("num_workers", "2.5", "whole number"),
        ("num_workers", "many", "whole number"),
        ("num_workers", True, "whole number"),
        ("batch_size", "null", "whole number"),
    ]:
        with pytest.raises(ConfigError, match=message):
            coerce_knob_value(name, raw)


@pytest.mark.parametrize(("raw", "mode"), [("off", "off"), ("FP16", "fp16"), (" bf16", "bf16")])
def test_amp_values(raw: str, mode: str) -> None:
    assert coerce_knob_value("amp", raw) == mode


@pytest.mark.parametrize("raw", ["fp32", "on", "", True])
def test_amp_rejects_other_values(raw: Any) -> None:
    with pytest.raises(ConfigError, match="amp takes one of off, fp16, bf16"):
        coerce_knob_value("amp", raw)


def test_parse_assignments() -> None:
    assert parse_assignments(["amp=bf16", " num_workers = 0..8 "], "--range") == {
        "amp": "bf16",
        "num_workers": "0..8",
    }
    for bad in ["amp", "=bf16", "amp=", "amp= "]:
        with pytest.raises(ConfigError, match="--fix .* is not KNOB=VALUE"):
            parse_assignments([bad], "--fix")


@pytest.mark.parametrize(
    "build",
    [
        lambda: coerce_knob_value("workers", "4"),
        lambda: SearchSpace(CPU, IMAGES, fixed={"workers": "4"}),
        lambda: SearchSpace(CPU, IMAGES, ranges={"lr": "1..2"}),
        lambda: SearchSpace(CPU, IMAGES, baseline={"batch": "64"}),
        lambda: check_knob_settings({}, {}, {"batchsize": 64}),
    ],
)
def test_unknown_knob_lists_the_known_knobs(build: Any) -> None:
    with pytest.raises(ConfigError, match="unknown knob") as info:
        build()
    for name in KNOBS:
        assert name in str(info.value)


@pytest.mark.parametrize(
    "build",
    [
        lambda: SearchSpace(CPU, IMAGES, ranges={"batch_size": "10..64"}),
        lambda: SearchSpace(CPU, IMAGES, ranges={"batch_size": "8,12"}),
        lambda: SearchSpace(CPU, IMAGES, effective_batch=100),
    ],
)
def test_searched_batch_sizes_are_multiples_of_8(build: Any) -> None:
    with pytest.raises(ConfigError, match="multiple"):
        build()


@pytest.mark.parametrize(
    "build",
    [
        lambda: check_knob_settings({"batch_size": 0}, {}, {}),
        lambda: coerce_knob_value("batch_size", "0"),
        lambda: SearchSpace(CPU, IMAGES, baseline={"batch_size": -4}),
    ],
)
def test_batch_size_must_be_positive(build: Any) -> None:
    with pytest.raises(ConfigError, match="batch_size -?[0-9]+ is not positive; use 1 or more"):
        build()


def test_any_positive_batch_size_is_accepted_where_the_user_sets_it() -> None:
    # Large models train with batches of 1-4; the searched grid alone is multiples of 8.
    assert Config(batch_size=1).batch_size == 1
    fixed = SearchSpace(CPU, IMAGES, fixed={"batch_size": "12"})
    assert fixed.choices["batch_size"] == (12,)
    assert fixed.baseline().batch_size == 12
    check_knob_settings({"batch_size": 4}, {}, {"batch_size": 3})


def test_config_refuses_a_batch_size_below_one() -> None:
    with pytest.raises(ValidationError, match="not positive"):
        Config(batch_size=0)


def test_check_knob_settings_accepts_valid_settings() -> None:
    check_knob_settings(
        {"amp": "bf16", "pin_memory": "yes"},
        {"batch_size": "16..128", "num_workers": {"min": 0, "max": 8}, "amp": "off,bf16"},
        {"num_workers": "4"},
    )
    with pytest.raises(ConfigError, match="--range"):
        check_knob_settings({}, {"amp": "off..bf16"}, {})


# -- ranges ----------------------------------------------------------------------------------


def test_range_lo_hi() -> None:
    space = SearchSpace(CPU, IMAGES, ranges={"batch_size": "16..128"})
    assert space.choices["batch_size"] == (16, 24, 32, 48, 64, 96, 128)


def test_range_endpoints_off_the_grid_are_included() -> None:
    space = SearchSpace(CPU, IMAGES, ranges={"batch_size": "40..72"})
    assert space.choices["batch_size"] == (40, 48, 64, 72)


def test_range_list() -> None:
    space = SearchSpace(CPU, IMAGES, ranges={"num_workers": "0,2,4"})
    assert space.choices["num_workers"] == (0, 2, 4)
    space = SearchSpace(CPU, IMAGES, ranges={"num_workers": [4, 2, 4]})
    assert space.choices["num_workers"] == (4, 2)


def test_range_dict_is_the_same_as_lo_hi() -> None:
    as_dict = SearchSpace(CPU, IMAGES, ranges={"batch_size": {"min": 16, "max": 128}})
    as_text = SearchSpace(CPU, IMAGES, ranges={"batch_size": "16..128"})
    assert as_dict.choices == as_text.choices
    open_ended = SearchSpace(CPU, IMAGES, ranges={"num_workers": {"min": 4}})
    assert open_ended.choices["num_workers"] == (4, 6, 8, 12, 16)


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ({"num_workers": {"lo": 1}}, "unknown keys"),
        ({"num_workers": "8..2"}, "upper end is below"),
        ({"pin_memory": "false..true"}, "numeric knob"),
        ({"batch_size": "4096..8192"}, "no allowed value left"),
        ({"amp": "fp16"}, "amp=fp16 cannot run on test cpu; use one of off"),
        ({"batch_size": "1024,2048"}, "no allowed value left"),
    ],
)
def test_bad_or_empty_ranges(ranges: dict[str, Any], message: str) -> None:
    small = WorkloadInfo(name="small", dataset_length=1000, input_batch_ndim=4, batch_size=32)
    with pytest.raises(ConfigError, match=message):
        SearchSpace(CPU, small, ranges=ranges)


def test_range_that_excludes_every_divisor_of_the_effective_batch() -> None:
    with pytest.raises(ConfigError, match="no allowed value left"):
        SearchSpace(CPU, IMAGES, ranges={"batch_size": "256..512"}, effective_batch=64)


def test_fix_wins_over_range() -> None:
    space = SearchSpace(CPU, IMAGES, fixed={"num_workers": 3}, ranges={"num_workers": "0..2"})
    assert space.choices["num_workers"] == (3,)
    assert space.fixed["num_workers"] == 3


# -- batch sizes -----------------------------------------------------------------------------


def test_effective_batch_choices_divide_it() -> None:
    space = SearchSpace(CPU, IMAGES, effective_batch=80)
    assert space.choices["batch_size"] == (8, 16, 40, 80)
    for batch in space.choices["batch_size"]:
        config = space.config_from({"batch_size": batch})
        assert config.grad_accum_steps == 80 // batch
        assert config.batch_size * config.grad_accum_steps == 80
    baseline = space.baseline()
    assert baseline.batch_size * baseline.grad_accum_steps == 80
    checklist = space.checklist()
    assert checklist.batch_size * checklist.grad_accum_steps == 80


def test_without_effective_batch_no_accumulation() -> None:
    space = SearchSpace(CPU, IMAGES)
    assert {
        space.config_from({"batch_size": b}).grad_accum_steps for b in space.choices["batch_size"]
    } == {1}


def test_fixed_batch_must_divide_the_effective_batch() -> None:
    # A fixed batch of 48 with an effective batch of 64 cannot be reached by accumulation.
    with pytest.raises(ConfigError, match="effective"):
        space = SearchSpace(CPU, IMAGES, fixed={"batch_size": 48}, effective_batch=64)
        config = space.config_from({})
        pytest.fail(
            f"accepted: trains batch {config.batch_size} x {config.grad_accum_steps} steps, "
            "not the effective batch 64"
        )


def test_batch_upper_bound_from_dataset_length() -> None:
    # An epoch must hold at least MIN_STEPS_PER_EPOCH (8) batches: 100 samples allow only 8.
    small = WorkloadInfo(name="small", dataset_length=100, input_batch_ndim=4, batch_size=32)
    assert max(SearchSpace(CPU, small).choices["batch_size"]) == 8
    exact = WorkloadInfo(name="exact", dataset_length=384, input_batch_ndim=4, batch_size=32)
    assert max(SearchSpace(CPU, exact).choices["batch_size"]) == 48
    iterable = WorkloadInfo(name="it", dataset_length=None, input_batch_ndim=4, batch_size=32)
    assert max(SearchSpace(CPU, iterable).choices["batch_size"]) == 2048
    medium = WorkloadInfo(name="medium", dataset_length=1024, input_batch_ndim=4, batch_size=32)
    assert SearchSpace(CPU, medium, effective_batch=256).choices["batch_size"] == (
        8,
        16,
        32,
        64,
        128,
    )


def test_dataset_smaller_than_the_smallest_batch_is_a_config_error() -> None:
    tiny = WorkloadInfo(name="tiny", dataset_length=5, input_batch_ndim=2, batch_size=8)
    with pytest.raises(ConfigError):
        space = SearchSpace(CPU, tiny)
        space.baseline()


def test_default_worker_bound_is_well_above_the_cores() -> None:
    assert default_max_workers(2) >= 16
    workers = SearchSpace(CPU, IMAGES).choices["num_workers"]
    assert workers[0] == 0
    assert max(workers) >= 16 >= 8 * CPU.cpu_count
    many = DeviceInfo(type="cpu", name="big", memory_bytes=2**36, cpu_count=32)
    assert max(SearchSpace(many, IMAGES).choices["num_workers"]) == 64


# -- the first configurations ----------------------------------------------------------------


def test_baseline_is_pytorch_defaults_with_the_workload_batch() -> None:
    workload = WorkloadInfo(name="w", dataset_length=50_000, input_batch_ndim=4, batch_size=48)
    for device in (CPU, AMPERE):
        space = SearchSpace(device, workload)
        assert space.baseline() == Config(batch_size=48)
        assert space.contains(space.baseline())


def test_baseline_overrides() -> None:
    space = SearchSpace(
        AMPERE,
        IMAGES,
        baseline={"num_workers": "4", "amp": "bf16", "pin_memory": "yes", "batch_size": 128},
    )
    baseline = space.baseline()
    assert (baseline.num_workers, baseline.amp, baseline.pin_memory, baseline.batch_size) == (
        4,
        "bf16",
        True,
        128,
    )
    assert baseline.tf32 is None  # not set by the user: PyTorch's defaults are left alone
    assert space.contains(baseline)


def test_baseline_with_workers_keeps_pytorch_prefetch_default() -> None:
    # The user's loader has 4 workers and the default prefetch (None, i.e. 2 per worker).
    baseline = SearchSpace(CPU, IMAGES, baseline={"num_workers": 4}).baseline()
    assert baseline.num_workers == 4
    assert baseline.prefetch_factor in (None, 2)
    assert baseline.persistent_workers is False


def test_fixed_knobs_apply_to_baseline_and_checklist() -> None:
    space = SearchSpace(CPU, IMAGES, fixed={"num_workers": 3, "channels_last": "true"})
    assert space.baseline().num_workers == space.checklist().num_workers == 3
    assert space.baseline().channels_last is space.checklist().channels_last is True


@pytest.mark.parametrize(
    ("device", "workload", "kwargs"),
    [
        (CPU, IMAGES, {}),
        (CPU, TOKENS, {}),
        (CPU_BF16, IMAGES, {"ranges": {"num_workers": "0..4"}}),
        (AMPERE, IMAGES, {}),
        (VOLTA, TOKENS, {"effective_batch": 128}),
        (AMPERE, IMAGES, {"ranges": {"batch_size": "16..64", "prefetch_factor": "4,8"}}),
    ],
)
def test_checklist_differs_from_baseline_and_lies_in_the_space(
    device: DeviceInfo, workload: WorkloadInfo, kwargs: dict[str, Any]
) -> None:
    space = SearchSpace(device, workload, **kwargs)
    baseline, checklist = space.baseline(), space.checklist()
    assert checklist.key() != baseline.key()
    assert space.contains(baseline)
    assert space.contains(checklist)
    assert checklist.num_workers > 0
    assert checklist.persistent_workers is True
    assert checklist.batch_size >= baseline.batch_size


def test_contains_rejects_configurations_outside_the_space() -> None:
    small = WorkloadInfo(name="small", dataset_length=1000, input_batch_ndim=4, batch_size=32)
    space = SearchSpace(CPU, small, ranges={"num_workers": "0..4"})
    assert space.contains(Config(batch_size=96))  # 1000 samples: at most 125 -> 120 per batch
    assert not space.contains(Config(batch_size=128))
    assert not space.contains(Config(pin_memory=True))
    assert not space.contains(Config(amp="bf16"))
    assert not space.contains(Config(num_workers=8))
    assert space.contains(Config(num_workers=0, prefetch_factor=None))
    assert not space.contains(Config(num_workers=2, prefetch_factor=3))
