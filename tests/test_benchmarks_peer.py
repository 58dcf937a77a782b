"""``benchmarks.peer``: the peer's pick in autotune's knobs, its models at its shapes, and a
refusal off CUDA. The comparison itself needs a GPU and the peer's package: it is run by hand
where one is lent (benchmarks/README.md), never here."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from autotune.space import Config
from benchmarks import _peer_tune
from benchmarks.peer import main, peer_config


def peer_models() -> ModuleType:
    return _peer_tune.peer_models()


def pick(precision: str, compile_mode: str = "off", cl: bool = False, fused: bool = False) -> dict:
    return {
        "precision": precision,
        "compile": compile_mode,
        "channels_last": cl,
        "fused_opt": fused,
    }


def test_the_peers_baseline_is_pytorchs_defaults_at_its_batch() -> None:
    assert peer_config(pick("fp32_default"), 64) == Config(batch_size=64)


def test_each_of_the_peers_knobs_has_its_counterpart() -> None:
    tf32 = peer_config(pick("tf32"), 128)
    assert (tf32.tf32, tf32.cudnn_benchmark, tf32.amp) == (True, True, "off")
    graphs = peer_config(pick("amp_fp16", "reduce-overhead", cl=True, fused=True), 128)
    assert graphs == Config(
        batch_size=128,
        amp="fp16",
        tf32=True,
        cudnn_benchmark=True,
        compile="reduce-overhead",
        channels_last=True,
        optimizer_impl="fused",
    )
    assert peer_config(pick("amp_bf16", "max-autotune"), 32).amp == "bf16"


def test_the_models_train_at_the_peers_shapes() -> None:
    models = peer_models()
    assert sum(p.numel() for p in models.MODELS["resnet18"].build().parameters()) == 11_689_512
    assert sum(p.numel() for p in models.MODELS["resnet50"].build().parameters()) == 25_557_032
    inputs, targets = models.example_batch("resnet18", "cpu")
    assert inputs.shape == (128, 3, 32, 32) and targets.shape == (128,)
    workload = models.transformer()
    tokens, following = workload.dataset()[0]
    assert tokens.shape == following.shape == (128,) and workload.batch_size == 32
    logits = workload.model()(tokens[None])
    loss = workload.loss(logits, following[None])
    assert logits.shape == (1, 128, models.VOCAB) and torch.isfinite(loss)


def test_it_refuses_a_cpu_in_one_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--device", "cpu"])
    assert exited.value.code == 2
    assert "pytorch-autotune tunes on CUDA only" in capsys.readouterr().err
