"""The step's own knobs: the optimizer's implementation, the DataLoader's ``in_order``, CUDA's
expandable segments and compile's CUDA-graph modes; where each applies, how it is applied in a
trial and by ``load_recommendation``, exported, refused when asked for on a device that cannot
use it, and set aside when a trial finds the workload's step cannot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from autotune.errors import ConfigError
from autotune.measure import (
    MeasurePlan,
    TrainingLoop,
    UnsuitedValue,
    build_loader,
    compile_unavailable,
    supported_implementations,
    with_implementation,
)
from autotune.measure._cuda_allocator import expandable_segments_environment
from autotune.measure._cuda_graphs import GraphWatch
from autotune.recommend import load_recommendation
from autotune.recommend._export import exports
from autotune.runner import probe_workload, run_trial
from autotune.search import InfeasibleSet, Observation, SearchState
from autotune.space import Config, DeviceInfo, SearchSpace, WorkloadInfo
from autotune.workload import Workload
from tests.conftest import FAST, rows

CPU = DeviceInfo(
    type="cpu",
    name="test cpu",
    memory_bytes=16 * 2**30,
    cpu_count=2,
    compile_unavailable=None,
    dataloader_in_order=True,
)
GPU = DeviceInfo(
    type="cuda",
    name="test GPU",
    memory_bytes=80 * 2**30,
    index=0,
    compute_capability=(9, 0),
    cpu_count=8,
    compile_unavailable=None,
    dataloader_in_order=True,
)
ADAMW = WorkloadInfo(
    name="text",
    dataset_length=4096,
    input_batch_ndim=2,
    batch_size=32,
    optimizer="AdamW",
    optimizer_impls=("foreach", "fused"),
)
LBFGS = ADAMW.model_copy(update={"optimizer": "LBFGS", "optimizer_impls": ()})


def two_groups() -> tuple[nn.Linear, torch.optim.AdamW]:
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    optimizer = torch.optim.AdamW(
        [
            {"params": [model.weight], "lr": 0.01, "weight_decay": 0.1},
            {"params": [model.bias], "lr": 0.02, "weight_decay": 0.0},
        ],
        lr=0.5,
        betas=(0.8, 0.9),
    )
    return model, optimizer


# -- optimizer_impl -----------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_the_users_optimizer_is_rebuilt_with_its_groups_and_hyper_parameters(impl: str) -> None:
    model, optimizer = two_groups()
    rebuilt = with_implementation(optimizer, impl)
    assert type(rebuilt) is torch.optim.AdamW
    assert rebuilt.defaults[impl] is True
    assert rebuilt.defaults["betas"] == (0.8, 0.9)
    for old, new in zip(optimizer.param_groups, rebuilt.param_groups, strict=True):
        assert new["params"] == old["params"]
        assert (new["lr"], new["weight_decay"], new[impl]) == (old["lr"], old["weight_decay"], True)
    other = "fused" if impl == "foreach" else "foreach"
    assert not rebuilt.param_groups[0][other]


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_each_implementation_steps_as_the_default_does(impl: str) -> None:
    results = []
    for chosen in ("default", impl):
        model, optimizer = two_groups()
        optimizer = with_implementation(optimizer, chosen)
        for _ in range(3):
            model(torch.ones(2, 8)).square().sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        results.append(torch.cat([model.weight.detach().flatten(), model.bias.detach()]))
    torch.testing.assert_close(results[0], results[1], rtol=1e-5, atol=1e-6)


def test_default_keeps_the_optimizer_and_a_stepped_or_flagless_one_is_refused() -> None:
    model, optimizer = two_groups()
    assert with_implementation(optimizer, "default") is optimizer
    with pytest.raises(ValueError, match="LBFGS does not take fused=True"):
        with_implementation(torch.optim.LBFGS(model.parameters()), "fused")
    model(torch.ones(2, 8)).sum().backward()
    optimizer.step()
    with pytest.raises(ValueError, match="stepped already"):
        with_implementation(optimizer, "foreach")


def tiny_workload(optimizer: Any) -> Workload:
    return Workload(
        model=lambda: nn.Linear(8, 2),
        dataset=lambda: TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))),
        loss=nn.CrossEntropyLoss(),
        optimizer=optimizer,
    )


def test_the_probe_finds_the_implementations_the_optimizer_steps_with() -> None:
    cpu = torch.device("cpu")
    adamw = tiny_workload(lambda params: torch.optim.AdamW(params, lr=1e-3))
    assert supported_implementations(adamw, cpu) == ("AdamW", ("foreach", "fused"))
    rmsprop = tiny_workload(lambda params: torch.optim.RMSprop(params, lr=1e-3))
    assert supported_implementations(rmsprop, cpu) == ("RMSprop", ("foreach",))
    lbfgs = tiny_workload(lambda params: torch.optim.LBFGS(params))
    assert supported_implementations(lbfgs, cpu) == ("LBFGS", ())
    # Adagrad makes its state when built (step 0): that is no step taken.
    adagrad = tiny_workload(lambda params: torch.optim.Adagrad(params, lr=0.1))
    assert supported_implementations(adagrad, cpu) == ("Adagrad", ("foreach", "fused"))


def test_a_trial_steps_the_rebuilt_optimizer() -> None:
    workload = tiny_workload(lambda params: torch.optim.AdamW(params, lr=3e-3))
    loop = TrainingLoop(workload, Config(batch_size=8, optimizer_impl="fused"), torch.device("cpu"))
    assert loop.optimizer.defaults["fused"] is True
    assert loop.optimizer.param_groups[0]["lr"] == 3e-3
    loop.step(loop.next_batch())
    assert loop.optimizer.state  # the rebuilt optimizer is the one that stepped


def test_optimizer_impl_is_searched_where_the_probe_found_implementations() -> None:
    assert SearchSpace(CPU, ADAMW).searched["optimizer_impl"] == ("default", "foreach", "fused")
    space = SearchSpace(CPU, LBFGS)
    assert "LBFGS took neither" in space.not_applicable["optimizer_impl"]
    with pytest.raises(ConfigError, match="--fix optimizer_impl=fused: optimizer_impl needs"):
        SearchSpace(CPU, LBFGS, fixed={"optimizer_impl": "fused"})
    only_foreach = ADAMW.model_copy(update={"optimizer_impls": ("foreach",)})
    with pytest.raises(ConfigError, match="does not take fused=True on this device"):
        SearchSpace(CPU, only_foreach, ranges={"optimizer_impl": "default,fused"})


def test_load_recommendation_rebuilds_the_users_optimizer(tmp_path: Any) -> None:
    document = recommendation(Config(optimizer_impl="foreach"))
    rec = load_recommendation(document, device="cpu")
    _, optimizer = two_groups()
    prepared = rec.prepare_optimizer(optimizer)
    assert prepared is not optimizer and prepared.defaults["foreach"] is True
    assert [g["lr"] for g in prepared.param_groups] == [0.01, 0.02]
    left = load_recommendation(recommendation(Config()), device="cpu")
    assert left.prepare_optimizer(optimizer) is optimizer


def test_the_implementation_is_exported_per_framework() -> None:
    fused = exports(Config(optimizer_impl="fused"), CPU, "AdamW")
    assert fused["optimizer"] == {"fused": True}
    assert fused["hf_training_arguments"]["optim"] == "adamw_torch_fused"
    assert "optimizer_impl" not in fused["set_by_hand"].get("hf_training_arguments", {})
    assert "configure_optimizers" in fused["set_by_hand"]["lightning_trainer"]["optimizer_impl"]
    assert 'exports["optimizer"]' in fused["set_by_hand"]["accelerate"]["optimizer_impl"]
    sgd = exports(Config(optimizer_impl="fused"), CPU, "SGD")
    assert "optim" not in sgd["hf_training_arguments"]  # the Trainer has no fused SGD
    assert (
        "optimizer_cls_and_kwargs" in sgd["set_by_hand"]["hf_training_arguments"]["optimizer_impl"]
    )
    assert "optimizer" not in exports(Config(), CPU, "AdamW")


# -- in_order -----------------------------------------------------------------------------------


def test_in_order_is_a_workers_knob_where_the_dataloader_takes_it() -> None:
    space = SearchSpace(CPU, ADAMW)
    assert space.searched["in_order"] == (True, False)
    assert space.config_from({"num_workers": 0, "in_order": False}).in_order is True
    assert space.baseline().in_order is True
    older = CPU.model_copy(update={"dataloader_in_order": False})
    assert "torch 2.6" in SearchSpace(older, ADAMW).not_applicable["in_order"]
    with pytest.raises(ConfigError, match="--range in_order=False: in_order needs torch 2.6"):
        SearchSpace(older, ADAMW, ranges={"in_order": "true,false"})


def test_the_trials_loader_and_the_export_hand_out_batches_out_of_order() -> None:
    workload = tiny_workload(lambda params: torch.optim.SGD(params, lr=0.1))
    config = Config(batch_size=8, num_workers=2, in_order=False)
    assert build_loader(workload, config, workload.dataset()).in_order is False
    assert build_loader(workload, Config(num_workers=2), workload.dataset()).in_order is True
    assert exports(config, CPU)["dataloader"]["in_order"] is False
    assert "in_order" not in exports(Config(num_workers=2), CPU)["dataloader"]
    rec = load_recommendation(recommendation(config), device="cpu")
    assert rec.dataloader(workload.dataset()).in_order is False
    assert rec.dataloader(workload.dataset(), num_workers=0).num_workers == 0


class _SlowFirst(Dataset[int]):
    """Sample 0 takes a while to load; the rest are immediate."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        if index == 0:
            time.sleep(1.0)
        return index


@pytest.mark.slow
def test_out_of_order_a_slow_sample_no_longer_holds_back_the_others() -> None:
    workload = Workload(
        model=lambda: nn.Linear(1, 1),
        dataset=_SlowFirst,
        loss=None,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
        dataloader_kwargs={"shuffle": False},
    )
    config = Config(batch_size=1, num_workers=2, in_order=False)
    batches = [int(b) for b in build_loader(workload, config, _SlowFirst())]
    assert sorted(batches) == list(range(8))  # every sample once per epoch
    assert batches[0] != 0  # the slow first sample came later, not first


# -- expandable_segments ------------------------------------------------------------------------


def test_expandable_segments_keep_the_users_other_allocator_settings() -> None:
    assert expandable_segments_environment({}) == {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"
    }
    found = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64,expandable_segments:False"}
    assert expandable_segments_environment(found) == {
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64,expandable_segments:True"
    }


def test_expandable_segments_apply_on_cuda_only_and_are_exported_as_the_environment() -> None:
    assert SearchSpace(GPU, ADAMW).searched["expandable_segments"] == (False, True)
    assert "CUDA" in SearchSpace(CPU, ADAMW).not_applicable["expandable_segments"]
    with pytest.raises(ConfigError, match="--fix expandable_segments=True: expandable"):
        SearchSpace(CPU, ADAMW, fixed={"expandable_segments": "true"})
    environment = exports(Config(expandable_segments=True), GPU)["environment"]
    assert environment == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


# -- compile's CUDA-graph modes, and values a device cannot use ---------------------------------


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune-no-cudagraphs"])
def test_a_gpu_compile_mode_asked_for_on_a_cpu_is_an_error_that_says_why(mode: str) -> None:
    assert mode in SearchSpace(GPU, ADAMW).searched["compile"]
    assert mode not in SearchSpace(CPU, ADAMW).choices["compile"]
    for ranges in ({"compile": mode}, {"compile": f"default,{mode}"}):
        with pytest.raises(ConfigError, match=f"--range compile={mode}: .*use default"):
            SearchSpace(CPU, ADAMW, ranges=ranges)
    with pytest.raises(ConfigError, match=f"--fix compile={mode}: "):
        SearchSpace(CPU, ADAMW, fixed={"compile": mode})
    with pytest.raises(ConfigError, match="--range pin_memory=True: pin_memory only"):
        SearchSpace(CPU, ADAMW, ranges={"pin_memory": "false,true"})


@pytest.fixture
def graph_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """GraphWatch sets inductor's cudagraph_or_error for reduce-overhead: restored after."""
    from torch._inductor import config as inductor

    monkeypatch.setattr(inductor.triton, "cudagraph_or_error", False)


def test_batches_that_change_shape_make_a_cuda_graph_mode_unsuited(graph_flag: None) -> None:
    watch = GraphWatch(Config(compile="reduce-overhead"))
    watch.saw((torch.zeros(16, 12), torch.zeros(16)))
    watch.saw((torch.zeros(16, 12), torch.zeros(16)))
    with pytest.raises(UnsuitedValue, match=r"^compile=reduce-overhead does not suit .*16x12"):
        watch.saw((torch.zeros(16, 20), torch.zeros(16)))
    for mode in ("default", "max-autotune-no-cudagraphs"):
        no_graphs = GraphWatch(Config(compile=mode))
        no_graphs.saw(torch.zeros(16, 12))
        no_graphs.saw(torch.zeros(16, 20))  # no graphs: shapes may change


def test_errors_cuda_graphs_raise_are_explained_and_others_pass(graph_flag: None) -> None:
    watch = GraphWatch(Config(compile="max-autotune"))
    overwritten = "Error: accessing tensor output of CUDAGraphs that has been overwritten"
    with (
        pytest.raises(UnsuitedValue, match="fails under CUDA graphs .*overwritten"),
        watch.failures_explained(),
    ):
        raise RuntimeError(overwritten)
    with pytest.raises(ValueError, match="the workload's own"), watch.failures_explained():
        raise ValueError("the workload's own error")


def test_an_unsuited_value_is_set_aside_for_the_rest_of_the_job() -> None:
    state = SearchState(InfeasibleSet())
    unsuited = Config(batch_size=32, compile="reduce-overhead")
    error = str(UnsuitedValue("compile", "reduce-overhead", "its batches change shape"))
    state.remember(unsuited, Observation(0.0, unsuited=error))
    other = Config(batch_size=64, num_workers=2, compile="reduce-overhead")
    assert state.infeasible.reason(other) == error
    assert state.infeasible.reason(Config(batch_size=64, compile="default")) is None


# -- through the real probe, trial process and command line --------------------------------------

PLAN = MeasurePlan(**FAST)


def step_knobs(name: str) -> str:
    return f"{Path(__file__).parent / 'workloads' / 'step_knobs.py'}:{name}"


@pytest.mark.slow
def test_the_probe_finds_the_implementations_and_a_trial_runs_them_out_of_order() -> None:
    """The probe (a real subprocess) reports what the search offers; a trial process applies
    the fused optimizer and an out-of-order loader with workers, and trains."""
    probe = probe_workload(step_knobs("static"), "cpu")
    assert probe.workload.optimizer == "AdamW"
    assert probe.workload.optimizer_impls == ("foreach", "fused")
    assert probe.device.dataloader_in_order is True
    space = SearchSpace(probe.device, probe.workload)
    assert space.searched["optimizer_impl"] == ("default", "foreach", "fused")
    config = Config(batch_size=16, num_workers=2, in_order=False, optimizer_impl="fused")
    record = run_trial(step_knobs("static"), config, "cpu", PLAN, 120)
    assert record.outcome == "ok", record.error
    assert record.losses_finite is True


def test_the_probe_offers_no_implementation_to_an_optimizer_without_flags() -> None:
    workload = Workload(
        model=lambda: nn.Linear(8, 2),
        dataset=lambda: TensorDataset(torch.randn(8, 8), torch.randint(0, 2, (8,))),
        loss=nn.CrossEntropyLoss(),
        optimizer=lambda params: torch.optim.LBFGS(params),
    )
    name, impls = supported_implementations(workload, torch.device("cpu"))
    info = ADAMW.model_copy(update={"optimizer": name, "optimizer_impls": impls})
    assert SearchSpace(CPU, info).choices["optimizer_impl"] == ("default",)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("option", "value"),
    [("--range", "compile=reduce-overhead"), ("--fix", "compile=max-autotune-no-cudagraphs")],
)
def test_the_cli_refuses_a_gpu_compile_mode_on_a_cpu_in_one_sentence(
    option: str, value: str, db_path: str, workload_file: Any
) -> None:
    """``autotune run ... --device cpu --range compile=reduce-overhead``: why, and exit 2
    (invalid input), before any trial."""
    result = subprocess.run(
        [sys.executable, "-m", "autotune", "run", workload_file("tiny"), "--device", "cpu"]
        + ["--db", db_path, option, value],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"autotune: error: {option} {value}: ")
    missing = compile_unavailable("cpu")  # then compile as a whole is what is refused
    why = "CUDA" if "reduce-overhead" in value else "GPU kernels"
    assert why in lines[0] if missing is None else missing in lines[0]
    assert rows(db_path, "SELECT COUNT(*) FROM autotune_trials") == [(0,)]


# -- on a GPU: CUDA graphs and expandable segments (run where one is lent) ------------------------


def _cuda_trial(name: str, config: Config) -> Any:
    return run_trial(step_knobs(name), config, "cuda:0", PLAN, 300, budget_is_host_memory=False)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune-no-cudagraphs"])
def test_the_cuda_compile_modes_train_a_static_step(mode: str) -> None:
    record = _cuda_trial("static", Config(batch_size=16, compile=mode))
    assert record.outcome == "ok", record.error
    assert record.compile_s is not None and record.losses_finite is True


@pytest.mark.cuda
def test_batches_that_change_shape_set_a_cuda_graph_mode_aside_with_the_reason() -> None:
    record = _cuda_trial("ragged", Config(batch_size=16, compile="reduce-overhead"))
    assert record.outcome == "unsuited", record.error
    assert record.error.startswith("compile=reduce-overhead does not suit this workload: ")
    assert "change shape" in record.error
    state = SearchState(InfeasibleSet())
    state.remember(record.config, Observation(0.0, unsuited=record.error))
    assert state.infeasible.reason(Config(batch_size=32, compile="reduce-overhead"))


@pytest.mark.cuda
@pytest.mark.parametrize("expandable", [False, True])
def test_a_trial_starts_cuda_with_expandable_segments_as_configured(expandable: bool) -> None:
    """The ``allocator`` workload's first forward pass raises what the allocator was set to."""
    record = _cuda_trial("allocator", Config(batch_size=16, expandable_segments=expandable))
    assert record.outcome == "error"
    assert f"expandable={expandable}" in (record.error or "")


@pytest.mark.cuda
def test_load_recommendation_turns_expandable_segments_on_before_cuda_starts(
    tmp_path: Path,
) -> None:
    document = recommendation(Config(expandable_segments=True))
    document["device"] = {"type": "cuda", "name": "gpu", "memory_bytes": 1}
    path = tmp_path / "best.json"
    path.write_text(json.dumps(document))
    script = (
        "import sys, torch, autotune\n"
        "autotune.load_recommendation(sys.argv[1])\n"
        "torch.zeros(1024, device='cuda')\n"
        "segments = torch.cuda.memory._snapshot()['segments']\n"
        "print(any(segment.get('is_expandable') for segment in segments))\n"
    )
    env = {k: v for k, v in os.environ.items() if "ALLOC_CONF" not in k}
    result = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


# -- helpers ------------------------------------------------------------------------------------


def recommendation(config: Config) -> dict[str, Any]:
    """A minimal valid recommendation document for ``config`` on a CPU."""
    knobs = config.public_dict()
    metrics = {
        "samples_per_s": 1.0,
        "step_time_ms": 1.0,
        "peak_memory_bytes": None,
        "peak_host_memory_bytes": 1,
        "data_wait_fraction": 0.0,
    }
    return {
        "schema": "autotune.recommendation/v1",
        "workload": "w",
        "device": {"type": "cpu", "name": "cpu", "memory_bytes": 1},
        "config": knobs,
        "metrics": metrics,
        "baseline": {"config": Config().public_dict(), "metrics": metrics},
        "speedup": 1.0,
        "trials": {"total": 1, "ok": 1, "failed": 0},
        "diagnosis": "Verdict: compute-bound.",
        "exports": exports(config, CPU),
    }
