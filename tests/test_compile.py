"""torch.compile as a knob: compile time measured apart from the steady state, charged against
the user's run length when configurations are ranked, and refused where it cannot run.

Compilation is real (inductor on the CPU, with g++); each compiled trial compiles from empty
caches, so these tests take tens of seconds each.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from conftest import rows

from autotune.errors import ConfigError
from autotune.measure import MeasurePlan
from autotune.recommend import load_recommendation, pick_candidates
from autotune.recommend._export import exports
from autotune.runner import probe_workload, run_trial
from autotune.search import compile_allowance
from autotune.space import Config, DeviceInfo, SearchSpace, WorkloadInfo
from autotune.store import TrialRecord, throughput_over_run
from autotune.tuner import TuneOptions
from autotune.tuner._judges import compile_lower_bound

FAST_FLAGS = [
    "--min-seconds",
    "0.3",
    "--min-steps",
    "3",
    "--warmup-steps",
    "1",
    "--confirm-top",
    "1",
    "--confirm-rounds",
    "1",
    "--no-profile",
]
CPU = DeviceInfo(
    type="cpu",
    name="cpu",
    memory_bytes=2**33,
    bf16_supported=True,
    cpu_count=2,
    compile_unavailable=None,
)
GPU = DeviceInfo(
    type="cuda",
    name="A100",
    memory_bytes=40 * 2**30,
    index=0,
    compute_capability=(8, 0),
    bf16_supported=True,
    compile_unavailable=None,
)
TINY = WorkloadInfo(name="tiny", dataset_length=512, input_batch_ndim=2, batch_size=32)
cuda = pytest.mark.cuda


def autotune(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


# -- the arithmetic of a run ---------------------------------------------------------------------


def test_throughput_over_a_run_charges_compile_time_once() -> None:
    # 10,000 samples at 1,000/s is 10 s; 10 s of compiling first halves the run's throughput.
    assert throughput_over_run(1000.0, 10.0, 10_000) == pytest.approx(500.0)
    assert throughput_over_run(1000.0, None, 10_000) == 1000.0
    assert throughput_over_run(1000.0, 10.0, None) == 1000.0
    record = TrialRecord(
        config=Config(compile="default"), outcome="ok", samples_per_s=1000.0, compile_s=10.0
    )
    assert record.samples_per_s_over(10_000) == pytest.approx(500.0)
    assert record.samples_per_s == 1000.0  # the steady state is kept as measured


def test_a_short_run_ranks_a_compiled_config_below_an_uncompiled_one() -> None:
    compiled = TrialRecord(
        config=Config(batch_size=64, compile="default"),
        outcome="ok",
        samples_per_s=1500.0,
        compile_s=20.0,
    )
    plain = TrialRecord(config=Config(batch_size=64), outcome="ok", samples_per_s=1000.0)
    baseline = Config(batch_size=32)
    # Steady state alone, and over a long run, compiling wins ...
    assert pick_candidates([plain, compiled], baseline, 1) == [compiled.config]
    assert pick_candidates([plain, compiled], baseline, 1, run_samples=10**7) == [compiled.config]
    # ... but over 10,000 samples (10 s uncompiled) 20 s of compiling cannot pay off.
    assert pick_candidates([plain, compiled], baseline, 1, run_samples=10_000) == [plain.config]


def test_run_length_is_epochs_of_the_dataset_or_steps_of_the_baseline_batch() -> None:
    options = TuneOptions(workload="x")
    baseline = Config(batch_size=32, grad_accum_steps=2)
    assert options.run_samples(512, baseline) == 512  # one epoch by default
    assert TuneOptions(workload="x", epochs=3).run_samples(512, baseline) == 1536
    assert TuneOptions(workload="x", steps=10).run_samples(512, baseline) == 640
    assert options.run_samples(None, baseline) is None
    with pytest.raises(ValueError, match="epochs or as steps, not both"):
        TuneOptions(workload="x", epochs=1, steps=1)


def test_a_compiling_trial_gets_the_compile_allowance_on_top_of_its_timeout() -> None:
    options = TuneOptions(workload="x", trial_timeout_s=60, compile_timeout_s=300)
    assert options.trial_timeout_for(Config()) == 60
    assert options.trial_timeout_for(Config(compile="default")) == 360


def test_compiling_longer_than_the_run_can_repay_beside_the_best_is_the_allowance() -> None:
    # 4,096 samples beside a best of 40,000/s over the run: past 0.2 s of compiling, even a
    # step that took no time leaves the run under half the best.
    allowance = compile_allowance(4096, [40_000.0, 10_000.0])
    assert allowance == pytest.approx(0.2048)
    assert throughput_over_run(10**12, allowance, 4096) == pytest.approx(0.5 * 40_000.0)
    assert compile_allowance(4096 * 90, [40_000.0]) == pytest.approx(90 * 0.2048)
    assert compile_allowance(None, [40_000.0]) is None  # no run length: nothing to repay
    assert compile_allowance(4096, []) is None  # no best yet


def test_a_default_compile_bounds_max_autotunes_from_below() -> None:
    assert compile_lower_bound({"default": 20.8}, "max-autotune") == 20.8
    assert compile_lower_bound({"default": 20.8, "max-autotune": 240.0}, "max-autotune") == 240.0
    # max-autotune's compiles say nothing about default's.
    assert compile_lower_bound({"max-autotune": 240.0}, "default") is None
    assert compile_lower_bound({"default": 20.8}, "default") == 20.8
    assert compile_lower_bound({"default": 20.8}, "off") is None
    # The CUDA-graph modes compile default's graph too; max-autotune does its variant's work.
    assert compile_lower_bound({"default": 20.8}, "reduce-overhead") == 20.8
    assert compile_lower_bound({"default": 20.8}, "max-autotune-no-cudagraphs") == 20.8
    assert compile_lower_bound({"max-autotune-no-cudagraphs": 90.0}, "max-autotune") == 90.0
    assert compile_lower_bound({"reduce-overhead": 30.0}, "default") is None


# -- what is searched where ----------------------------------------------------------------------


def test_a_device_not_probed_is_not_known_to_compile() -> None:
    described = DeviceInfo(type="cpu", name="cpu", memory_bytes=2**33)
    assert "was not checked" in SearchSpace(described, TINY).not_applicable["compile"]


def test_max_autotune_is_searched_on_cuda_only() -> None:
    assert SearchSpace(GPU, TINY).choices["compile"] == (
        "off",
        "default",
        "reduce-overhead",
        "max-autotune",
        "max-autotune-no-cudagraphs",
    )
    assert SearchSpace(CPU, TINY).choices["compile"] == ("off", "default")
    with pytest.raises(ConfigError, match="max-autotune tunes GPU kernels.*use default"):
        SearchSpace(CPU, TINY, fixed={"compile": "max-autotune"})


@pytest.mark.slow
def test_fix_compile_default_is_accepted_on_this_cpu(workload_file: Any) -> None:
    probe = probe_workload(workload_file("tiny"), "cpu")
    assert probe.device.compile_unavailable is None
    space = SearchSpace(probe.device, probe.workload, fixed={"compile": "default"})
    assert space.fixed["compile"] == "default"
    assert space.baseline().compile == "default"  # a fixed knob holds the baseline too


@pytest.mark.slow
def test_without_a_cxx_compiler_compile_is_not_applicable_and_says_why(
    workload_file: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A PATH without g++: the probe process looks for inductor's compiler as torch would.
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CXX", raising=False)
    probe = probe_workload(workload_file("tiny"), "cpu")
    space = SearchSpace(probe.device, probe.workload)
    reason = space.not_applicable["compile"]
    assert "needs a C++ compiler" in reason and "'g++' is not on PATH" in reason
    assert space.choices["compile"] == ("off",)
    with pytest.raises(ConfigError, match="--fix compile=default: compile needs a C"):
        SearchSpace(probe.device, probe.workload, fixed={"compile": "default"})


# -- real compilation ----------------------------------------------------------------------------


@pytest.mark.slow
def test_bench_measures_compile_time_apart_from_the_steady_state(
    tmp_path: Path, workload_file: Any
) -> None:
    config = tmp_path / "compiled.json"
    config.write_text(json.dumps({"batch_size": 32, "compile": "default"}))
    db = str(tmp_path / "autotune.db")
    result = autotune(
        "bench",
        workload_file("tiny"),
        "--config",
        str(config),
        "--repeats",
        "1",
        "--db",
        db,
        "--device",
        "cpu",
        *FAST_FLAGS[:6],
    )
    assert result.returncode == 0, result.stderr
    assert "torch.compile took" in result.stdout
    [(outcome, samples_per_s, compile_s, window_s)] = rows(
        db, "SELECT outcome, samples_per_s, compile_s, window_s FROM autotune_trials"
    )
    assert outcome == "ok"
    assert samples_per_s > 0 and compile_s > 0
    # Compilation took far longer than the timed window, which it is not part of.
    assert compile_s > window_s


def compile_or_not(
    tmp_path: Path, workload: str, *flags: str
) -> tuple[str, subprocess.CompletedProcess[str], dict[str, Any]]:
    """A two-trial job over compile off/default, the rest fixed, for a run of 10 steps; its
    database, the finished process and its recommendation."""
    db, out = str(tmp_path / "autotune.db"), tmp_path / "best.json"
    result = autotune(
        "run",
        workload,
        "--trials",
        "2",
        "--db",
        db,
        "--out",
        str(out),
        "--device",
        "cpu",
        "--fix",
        "batch_size=32",
        "--fix",
        "num_workers=0",
        "--fix",
        "amp=off",
        "--fix",
        "intra_op_threads=null",
        "--fix",
        "optimizer_impl=default",
        "--range",
        "compile=off,default",
        "--steps",
        "10",
        *flags,
        *FAST_FLAGS,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    return db, result, json.loads(out.read_text())


@pytest.mark.slow
def test_a_job_ranks_by_throughput_over_the_run_compile_included(
    tmp_path: Path, workload_file: Any
) -> None:
    db, result, document = compile_or_not(tmp_path, workload_file("tiny"), "--no-prune")
    assert document["run"] == {"samples": 320, "steps": 10, "epochs": None}
    # Ten steps cannot pay back seconds of compiling: the uncompiled baseline is kept.
    assert document["config"]["compile"] == "off"
    assert document["metrics"]["compile_s"] is None
    [candidate] = document["candidates"]
    assert candidate["config"]["compile"] == "default"
    metrics = candidate["metrics"]
    assert metrics["compile_s"] > 0
    assert metrics["run_samples_per_s"] == pytest.approx(
        throughput_over_run(metrics["samples_per_s"], metrics["compile_s"], 320)
    )
    assert metrics["run_samples_per_s"] < metrics["samples_per_s"]

    # The search's objective was the throughput over the run; the row keeps the steady state.
    [(samples_per_s, compile_s, number)] = rows(
        db,
        "SELECT samples_per_s, compile_s, optuna_number FROM autotune_trials "
        "WHERE phase = 'search' AND compile_s IS NOT NULL",
    )
    study = optuna.load_study(
        study_name=f"autotune-job-{document['job_id']}", storage=f"sqlite:///{db}"
    )
    objective = study.trials[number].value
    assert objective == pytest.approx(throughput_over_run(samples_per_s, compile_s, 320))
    assert [
        r[0]
        for r in rows(
            db,
            "SELECT compile_s FROM autotune_trials WHERE json_extract(config, '$.compile') = 'off'",
        )
    ] == [None, None]


@pytest.mark.slow
def test_a_compile_longer_than_the_run_can_repay_is_stopped_while_compiling(
    tmp_path: Path, workload_file: Any
) -> None:
    db, result, document = compile_or_not(tmp_path, workload_file("tiny"))
    assert "pruned while compiling" in result.stderr
    assert document["config"]["compile"] == "off"
    [(pruned, in_warmup, samples_per_s, compile_s, number)] = rows(
        db,
        "SELECT pruned, pruned_during_warmup, samples_per_s, compile_s, optuna_number "
        "FROM autotune_trials WHERE json_extract(config, '$.compile') = 'default'",
    )
    assert pruned and in_warmup and samples_per_s is None
    # Stopped at the allowance the baseline's throughput over the run gave, a lower bound of
    # its compile time (a whole compile of this model on a CPU takes seconds).
    study = optuna.load_study(
        study_name=f"autotune-job-{document['job_id']}", storage=f"sqlite:///{db}"
    )
    baseline_value = study.trials[0].value
    assert baseline_value is not None
    assert compile_s == pytest.approx(compile_allowance(320, [baseline_value]))
    assert study.trials[number].state == optuna.trial.TrialState.PRUNED


def test_the_apply_api_compiles_what_is_recommended(tmp_path: Path) -> None:
    device = DeviceInfo(type="cpu", name="cpu", memory_bytes=2**30)
    config = Config(batch_size=8, compile="default")
    metrics = {
        "samples_per_s": 1.0,
        "step_time_ms": 1.0,
        "peak_memory_bytes": None,
        "peak_host_memory_bytes": None,
        "data_wait_fraction": 0.0,
    }
    document = {
        "schema": "autotune.recommendation/v1",
        "workload": "w",
        "device": device.public_dict(),
        "config": config.public_dict(),
        "metrics": metrics,
        "baseline": {"config": Config().public_dict(), "metrics": metrics},
        "speedup": 1.0,
        "trials": {"total": 1, "ok": 1, "failed": 0},
        "diagnosis": "",
        "exports": exports(config, device),
    }
    assert document["exports"]["torch_compile"] == {"mode": None}
    hf = document["exports"]["hf_training_arguments"]
    assert hf["torch_compile"] is True and hf["torch_compile_mode"] == "default"
    model = load_recommendation(document).prepare_model(torch.nn.Linear(4, 2))
    assert isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
    # A document written before compile was a knob still loads, uncompiled.
    del document["config"]["compile"]
    assert load_recommendation(document).config.compile == "off"


@pytest.mark.slow
@cuda
def test_max_autotune_compiles_on_cuda(workload_file: Any) -> None:
    plan = MeasurePlan(warmup_steps=1, min_steps=3, min_seconds=0.3)
    result = run_trial(
        workload_file("tiny"),
        Config(batch_size=32, compile="max-autotune"),
        "cuda",
        plan,
        timeout_s=900,
    )
    assert result.outcome == "ok", result.error
    assert result.compile_s is not None and result.compile_s > 0


@pytest.mark.slow
@cuda
def test_cuda_probe_finds_triton_for_compile(workload_file: Any) -> None:
    probe = probe_workload(workload_file("tiny"), "cuda")
    assert probe.device.compile_unavailable is None
    assert "max-autotune" in SearchSpace(probe.device, probe.workload).choices["compile"]
