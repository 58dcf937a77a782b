"""Dict batches are keyword arguments (``model(**inputs)``), as Hugging Face's Trainer passes
them: in a real trial, with a model that computes its own loss, with the positional override,
and in the apply API. A real ``BertForSequenceClassification`` (built from a config, nothing
downloaded) trains unwrapped.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from autotune import Workload
from autotune.errors import WorkloadError
from autotune.measure import MeasurePlan, call_model, returned_loss
from autotune.recommend import load_recommendation
from autotune.recommend._export import exports
from autotune.runner import run_trial
from autotune.space import Config, DeviceInfo
from autotune.store import TrialRecord
from autotune.workload import load_workload

PLAN = MeasurePlan(warmup_steps=1, min_steps=3, min_seconds=0.3)


def _trial(ref: str, config: Config | None = None) -> TrialRecord:
    return run_trial(ref, config or Config(batch_size=16), "cpu", PLAN, timeout_s=120)


@pytest.mark.slow
def test_dict_inputs_are_keyword_arguments_in_a_real_trial(workload_file: Any) -> None:
    result = _trial(workload_file("keyword_inputs"), Config(batch_size=16, num_workers=1))
    assert result.outcome == "ok", result.error
    assert result.samples_per_s and result.samples_per_s > 0


@pytest.mark.slow
def test_a_model_that_computes_its_own_loss_from_labels_in_the_dict(workload_file: Any) -> None:
    result = _trial(workload_file("keyword_inputs") + ":model_loss")
    assert result.outcome == "ok", result.error
    assert result.losses_finite is True


@pytest.mark.slow
def test_positional_override_passes_the_dict_as_one_argument(workload_file: Any) -> None:
    assert _trial(workload_file("keyword_inputs") + ":positional").outcome == "ok"
    # Without the override the same model is called as model(**batch), which it refuses.
    unwrapped = _trial(workload_file("keyword_inputs") + ":positional_left_auto")
    assert unwrapped.outcome == "error"
    assert "unexpected keyword argument 'input_ids'" in (unwrapped.error or "")


@pytest.mark.slow
def test_hugging_face_bert_trains_unwrapped_in_a_real_trial(workload_file: Any) -> None:
    result = _trial(workload_file("hf_bert"))
    assert result.outcome == "ok", result.error
    assert result.samples_per_s and result.samples_per_s > 0


def test_the_rule_and_its_errors() -> None:
    def add(x: int, y: int) -> int:
        return x + y

    assert call_model(add, {"x": 1, "y": 2}) == 3
    assert call_model(len, {"x": 1, "y": 2}, "positional") == 2
    assert call_model(len, [1, 2, 3]) == 3
    with pytest.raises(TypeError, match="model_inputs='kwargs'.*this input batch is a list"):
        call_model(len, [1, 2], "kwargs")
    with pytest.raises(TypeError, match="expects the model to return its loss"):
        returned_loss({"logits": torch.zeros(2, 3)})
    assert returned_loss(torch.tensor(0.5)).item() == 0.5


def test_an_unknown_model_inputs_style_is_refused(tmp_path: Any) -> None:
    path = tmp_path / "odd.py"
    path.write_text(
        "import torch\nfrom autotune import Workload\n"
        "def workload():\n"
        "    return Workload(model=lambda: torch.nn.Linear(2, 2), dataset=lambda: [], loss=None,"
        " optimizer=lambda p: torch.optim.SGD(p, lr=0.1), model_inputs='keywords')\n"
    )
    with pytest.raises(WorkloadError, match="model_inputs 'keywords' is not one of auto"):
        load_workload(str(path))


def _document(config: Config) -> dict[str, Any]:
    metrics = {
        "samples_per_s": 100.0,
        "step_time_ms": 10.0,
        "peak_memory_bytes": None,
        "peak_host_memory_bytes": None,
        "data_wait_fraction": 0.0,
    }
    device = DeviceInfo(type="cpu", name="test cpu", memory_bytes=2**30)
    return {
        "schema": "autotune.recommendation/v1",
        "workload": "hf-bert",
        "device": device.public_dict(),
        "config": config.public_dict(),
        "metrics": metrics,
        "baseline": {"config": Config().public_dict(), "metrics": metrics},
        "speedup": 1.0,
        "trials": {"total": 1, "ok": 1, "failed": 0},
        "diagnosis": "",
        "exports": exports(config, device),
    }


def test_apply_api_trains_bert_on_dict_batches(workload_file: Any) -> None:
    workload: Workload = load_workload(workload_file("hf_bert"))
    rec = load_recommendation(_document(Config(batch_size=8, num_workers=1)))
    model = rec.prepare_model(workload.model())
    optimizer = workload.optimizer(model.parameters())
    before = [p.detach().clone() for p in model.parameters()]
    steps = 0
    for batch in rec.batches(rec.dataloader(workload.dataset(), shuffle=True)):
        with rec.autocast():
            loss = rec.call_model(model, batch).loss  # model(**batch), labels inside
        rec.backward(loss, optimizer)
        steps += 1
        if steps == 3:
            break
    assert steps == 3
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
