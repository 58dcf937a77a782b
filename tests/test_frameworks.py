"""Framework workloads: a transformers Trainer and a Lightning (module, datamodule) read into
the measured step, for real (tests/workloads/hf_trainer.py and lit.py), in this process."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import WORKLOADS

from autotune.errors import WorkloadError
from autotune.measure._loop import TrainingLoop, build_loader
from autotune.measure._step import TrainingStep
from autotune.recommend._export import exports
from autotune.space import Config, DeviceInfo, SearchSpace, WorkloadInfo
from autotune.workload import Workload, load_workload

transformers = pytest.importorskip("transformers")
L = pytest.importorskip("lightning")

CPU = torch.device("cpu")
CPU_INFO = DeviceInfo(
    type="cpu", name="test cpu", memory_bytes=16 * 2**30, cpu_count=4, bf16_supported=True
)


@pytest.fixture(autouse=True)
def _quiet_lightning() -> Any:
    with warnings.catch_warnings():
        # self.log() outside a Trainer warns (and logs nothing); Lightning prints tips.
        warnings.simplefilter("ignore")
        yield


def hf(function: str = "make_trainer") -> Workload:
    return load_workload(f"{WORKLOADS / 'hf_trainer.py'}:{function}")


def lit(function: str = "make") -> Workload:
    return load_workload(f"{WORKLOADS / 'lit.py'}:{function}")


def run_steps(workload: Workload, config: Config, steps: int = 2) -> TrainingLoop:
    loop = TrainingLoop(workload, config, CPU)
    for _ in range(steps):
        loop.step(loop.next_batch())
    loop.check_finite()
    return loop


# -- Hugging Face -------------------------------------------------------------------------------


def test_a_trainer_is_a_workload_with_its_arguments_as_the_baseline() -> None:
    workload = hf()
    assert workload.name == "hf_trainer"
    assert workload.batch_size == 16
    assert workload.max_grad_norm == 1.0  # TrainingArguments' default clips every step
    assert workload.model_inputs == "kwargs"
    assert workload.baseline == {"num_workers": 0, "pin_memory": False, "amp": "off"}
    loop = run_steps(workload, Config(batch_size=16))
    # The optimizer TrainingArguments choose (fused AdamW), with the Trainer's two groups.
    assert type(loop.optimizer).__name__ == "AdamW"
    assert loop.optimizer.defaults["fused"] is True
    assert len(loop.optimizer.param_groups) == 2
    assert loop.training.max_grad_norm == 1.0


def test_the_trainer_s_collator_drops_the_columns_the_model_does_not_take() -> None:
    workload = hf()
    loader = build_loader(workload, Config(batch_size=8), workload.dataset())
    batch = next(iter(loader))
    assert sorted(batch) == ["attention_mask", "input_ids", "labels", "token_type_ids"] or sorted(
        batch
    ) == ["attention_mask", "input_ids", "labels"]
    assert "text" not in batch  # remove_unused_columns=True, the default


def make_configured_trainer(tmp_path: Path, **arguments: Any) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("hf_trainer_module", WORKLOADS / "hf_trainer.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    trainer = module.make_trainer()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), report_to="none", **{"use_cpu": True, **arguments}
    )
    return transformers.Trainer(
        model=trainer.model,
        args=args,
        train_dataset=trainer.train_dataset,
        data_collator=trainer.data_collator,
    )


def test_the_optimizer_and_clipping_come_from_the_training_arguments(tmp_path: Path) -> None:
    from autotune.workload.frameworks.huggingface import from_trainer

    trainer = make_configured_trainer(
        tmp_path, optim="sgd", learning_rate=0.25, weight_decay=0.1, max_grad_norm=0.0
    )
    workload = from_trainer(trainer)
    assert workload.max_grad_norm is None  # 0 turns clipping off, as in the Trainer
    model = workload.model()
    optimizer = workload.optimizer(model.parameters())
    assert type(optimizer) is torch.optim.SGD
    assert {group["lr"] for group in optimizer.param_groups} == {0.25}
    assert sorted(group["weight_decay"] for group in optimizer.param_groups) == [0.0, 0.1]


@pytest.mark.parametrize(
    "config",
    [
        Config(batch_size=8, num_workers=2, prefetch_factor=4, persistent_workers=True),
        Config(batch_size=24, amp="bf16", compile="default"),
        Config(batch_size=16, num_workers=1),
    ],
    ids=["workers", "bf16 compiled", "one worker"],
)
def test_the_exports_read_back_through_the_adapter_are_the_recommendation(
    config: Config, tmp_path: Path
) -> None:
    """What the user runs after applying the export is what autotune measured: the exported
    TrainingArguments, read as a workload, have the recommended knobs as their baseline."""
    from autotune.workload.frameworks.huggingface import from_trainer

    kwargs = exports(config, CPU_INFO)["hf_training_arguments"]
    workload = from_trainer(make_configured_trainer(tmp_path, **kwargs))
    space = SearchSpace(CPU_INFO, info_of(workload))
    assert workload.batch_size == config.batch_size
    baseline = space.baseline().normalized()
    for name in ("batch_size", "num_workers", "prefetch_factor", "persistent_workers", "amp"):
        assert getattr(baseline, name) == getattr(config.normalized(), name), name


def info_of(workload: Workload) -> WorkloadInfo:
    return WorkloadInfo(
        name="w",
        dataset_length=512,
        input_batch_ndim=2,
        batch_size=workload.batch_size,
        baseline=workload.baseline,
    )


def test_the_baseline_starts_from_the_framework_s_knobs_and_baseline_flags_override() -> None:
    info = info_of(
        Workload(
            model=lambda: torch.nn.Linear(2, 2),
            dataset=lambda: None,  # type: ignore[arg-type,return-value]
            loss=None,
            optimizer=lambda p: torch.optim.SGD(p, lr=0.1),
            batch_size=16,
            baseline={"num_workers": 2, "persistent_workers": True, "amp": "bf16"},
        )
    )
    plain = SearchSpace(CPU_INFO, info).baseline()
    assert (plain.num_workers, plain.persistent_workers, plain.amp) == (2, True, "bf16")
    overridden = SearchSpace(CPU_INFO, info, baseline={"num_workers": 0}).baseline()
    assert overridden.num_workers == 0 and overridden.amp == "bf16"


def test_the_trainer_s_accumulation_is_refused_with_a_fix(tmp_path: Path) -> None:
    from autotune.workload.frameworks.huggingface import from_trainer

    accumulating = make_configured_trainer(
        tmp_path, per_device_train_batch_size=16, gradient_accumulation_steps=4
    )
    with pytest.raises(WorkloadError, match="--effective-batch 64"):
        from_trainer(accumulating)


def test_a_trainer_given_an_optimizer_instance_is_refused(tmp_path: Path) -> None:
    from autotune.workload.frameworks.huggingface import from_trainer

    trainer = make_configured_trainer(tmp_path)
    trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=0.1)
    with pytest.raises(WorkloadError, match="TrainingArguments\\(optim=...\\)"):
        from_trainer(trainer)


# -- the step clips, as the frameworks do --------------------------------------------------------


@pytest.mark.parametrize("max_grad_norm", [None, 0.01])
def test_the_step_clips_the_gradients_to_max_grad_norm(max_grad_norm: float | None) -> None:
    weight = torch.nn.Parameter(torch.zeros(4))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    step = TrainingStep(Config(), CPU, max_grad_norm)
    step.backward((weight * 100.0).sum(), optimizer)
    moved = float(weight.detach().norm())
    assert moved == pytest.approx(0.01 if max_grad_norm else 200.0, rel=1e-4)


def test_the_trainer_s_loop_work_runs_around_each_measured_step() -> None:
    workload = hf("make_trainer_with_callback")
    loop = run_steps(workload, Config(batch_size=16), steps=3)
    hooks = loop.training.hooks
    counter = next(cb for cb in hooks._callbacks.callbacks if type(cb).__name__ == "CountsSteps")
    assert counter.events == [
        event
        for step in (1, 2, 3)
        for event in ("step_begin", "pre_optimizer_step", f"step_end {step}")
    ]
    # The Trainer's default linear schedule stepped the learning rate down from the script's.
    rates = [group["lr"] for group in loop.optimizer.param_groups]
    assert all(0 < rate < 5e-5 for rate in rates)


def test_accumulation_sends_step_events_per_optimizer_step_as_the_trainer_does() -> None:
    workload = hf("make_trainer_with_callback")
    loop = run_steps(workload, Config(batch_size=16, grad_accum_steps=2), steps=4)
    counter = next(
        cb for cb in loop.training.hooks._callbacks.callbacks if type(cb).__name__ == "CountsSteps"
    )
    assert counter.events == [
        event
        for step in (1, 2)
        for event in ("step_begin", "substep_end", "pre_optimizer_step", f"step_end {step}")
    ]


def test_a_callback_that_needs_train_fails_naming_the_event_and_the_fix() -> None:
    with pytest.raises(
        WorkloadError, match=r"failed in on_step_end \(AttributeError.*outside train"
    ):
        run_steps(hf("make_trainer_with_a_callback_needing_train"), Config(batch_size=16))


def test_a_plateau_schedule_is_not_stepped_each_step_as_in_train(tmp_path: Path) -> None:
    from autotune.workload.frameworks.huggingface import TrainerHooks

    script = make_configured_trainer(tmp_path)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        report_to="none",
        use_cpu=True,
        eval_strategy="steps",
        lr_scheduler_type="reduce_lr_on_plateau",
    )
    trainer = transformers.Trainer(
        model=script.model,
        args=args,
        train_dataset=script.train_dataset,
        eval_dataset=script.train_dataset,
        data_collator=script.data_collator,
    )
    model = trainer.model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    hooks = TrainerHooks(trainer, model, optimizer)
    for _ in range(3):  # ReduceLROnPlateau.step() without a metric raises
        hooks.before_step({}, 0)
        hooks.before_optimizer_step(optimizer)
        hooks.after_optimizer_step(optimizer)
        hooks.after_step(torch.tensor(1.0), {}, 0)
    assert optimizer.param_groups[0]["lr"] == 0.1


def test_the_trainer_s_reporting_integrations_are_not_run_in_trials(tmp_path: Path) -> None:
    from transformers.integrations.integration_utils import TensorBoardCallback

    from autotune.workload.frameworks.huggingface import TrainerHooks

    trainer = make_configured_trainer(tmp_path)

    class Reporting(TensorBoardCallback):
        def __init__(self) -> None:
            self.began = False

        def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
            self.began = True

    reporting = Reporting()
    trainer.add_callback(reporting)
    model = trainer.model
    TrainerHooks(trainer, model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert not reporting.began


# -- Lightning ----------------------------------------------------------------------------------


def test_a_module_and_datamodule_are_a_workload_stepping_the_module_s_own_step() -> None:
    workload = lit()
    assert workload.name == "lit"
    assert workload.batch_size == 32
    assert workload.model_inputs == "training_step"
    assert workload.baseline == {"num_workers": 0, "pin_memory": False, "amp": "off"}
    assert workload.max_grad_norm is None
    loop = TrainingLoop(workload, Config(batch_size=32), CPU)
    seen: list[int] = []
    module = loop.model
    original = module.training_step

    def recording(batch: Any, batch_idx: int) -> Any:
        seen.append(batch_idx)
        return original(batch, batch_idx)

    module.training_step = recording  # type: ignore[method-assign]
    for _ in range(3):
        loop.step(loop.next_batch())
    assert seen == [0, 1, 2]
    # configure_optimizers' optimizer, with its own hyper-parameters.
    assert loop.optimizer.defaults["weight_decay"] == 0.05


def test_a_trainer_third_gives_the_precision_and_clipping() -> None:
    workload = lit("make_with_trainer")
    assert workload.baseline["amp"] == "bf16"
    assert workload.max_grad_norm == 0.5
    run_steps(workload, Config(batch_size=32, amp="bf16"))


class _Pairs(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.full((4,), float(index)), torch.tensor(index % 2)


def _collate(samples: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.stack([s[0] for s in samples]) * 2, torch.stack([s[1] for s in samples])


class _Linear(L.LightningModule):
    def __init__(self, manual: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)
        self.automatic_optimization = not manual

    def training_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        return {"loss": torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])}

    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(self.parameters(), lr=0.1)], []


class _Data(L.LightningDataModule):
    def __init__(self, **loader: Any) -> None:
        super().__init__()
        self.loader = loader

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(_Pairs(), **self.loader)


def test_the_datamodule_s_loader_is_rebuilt_keeping_its_dataset_sampler_and_collate() -> None:
    from autotune.workload.frameworks.lightning import from_lightning

    sampler = torch.utils.data.WeightedRandomSampler([1.0] * 64, num_samples=64)
    workload = from_lightning(
        (_Linear(), _Data(batch_size=16, sampler=sampler, collate_fn=_collate, num_workers=0))
    )
    assert workload.batch_size == 16
    loader = build_loader(workload, Config(batch_size=8), workload.dataset())
    assert loader.sampler is sampler
    assert loader.collate_fn is _collate
    assert loader.batch_size == 8
    inputs, _ = next(iter(loader))
    assert float(inputs[:, 0].max()) % 2 == 0  # the collate function ran
    # A list of optimizers and schedulers: the first optimizer; a dict loss is the loss.
    run_steps(workload, Config(batch_size=8))


@pytest.mark.parametrize(
    "config",
    [
        Config(batch_size=8, num_workers=2, prefetch_factor=4, persistent_workers=True),
        Config(batch_size=24, amp="bf16"),
        Config(batch_size=16, num_workers=1),
    ],
    ids=["workers", "bf16", "one worker"],
)
def test_the_lightning_exports_read_back_through_the_adapter_are_the_recommendation(
    config: Config,
) -> None:
    """The DataModule built with exports["dataloader"] and the Trainer with
    exports["lightning_trainer"], read as a workload, have the recommended knobs as baseline."""
    from autotune.workload.frameworks.lightning import from_lightning

    section = exports(config, CPU_INFO)
    trainer = L.Trainer(**section["lightning_trainer"], logger=False, enable_progress_bar=False)
    workload = from_lightning((_Linear(), _Data(**section["dataloader"]), trainer))
    baseline = SearchSpace(CPU_INFO, info_of(workload)).baseline().normalized()
    assert workload.batch_size == config.batch_size
    for name in ("batch_size", "num_workers", "prefetch_factor", "persistent_workers", "amp"):
        assert getattr(baseline, name) == getattr(config.normalized(), name), name


def test_manual_optimization_is_refused_with_a_fix() -> None:
    from autotune.workload.frameworks.lightning import from_lightning

    with pytest.raises(WorkloadError, match="automatic_optimization=False"):
        from_lightning((_Linear(manual=True), _Data(batch_size=8)))


def test_a_custom_batch_sampler_is_refused_with_a_fix() -> None:
    from autotune.workload.frameworks.lightning import from_lightning

    batches = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(64)), 8, False)

    class Batches(torch.utils.data.BatchSampler):
        pass

    custom = Batches(torch.utils.data.SequentialSampler(range(64)), 8, False)
    from_lightning((_Linear(), _Data(batch_sampler=batches)))  # a plain one is a batch size
    with pytest.raises(WorkloadError, match="custom batch_sampler"):
        from_lightning((_Linear(), _Data(batch_sampler=custom)))


def test_a_plain_workload_and_other_returns_are_unchanged(workload_file: Any) -> None:
    assert isinstance(load_workload(workload_file("tiny")), Workload)
    with pytest.raises(WorkloadError, match="returned int, expected autotune.Workload"):
        load_workload(workload_file("bad_return"))


# -- end to end: `autotune run` on the framework's script, the answer applied through exports -----

#: A tiny job: four measurements, no profile, no compile (test_compile.py times that).
TINY_JOB = [
    "--trials", "2", "--device", "cpu", "--min-seconds", "0.3", "--min-steps", "3",
    "--warmup-steps", "1", "--confirm-top", "1", "--confirm-rounds", "1", "--no-profile",
    "--fix", "compile=off",
]  # fmt: skip


def tune(spec: str, tmp_path: Path) -> dict[str, Any]:
    """``autotune run spec`` as a user runs it; the recommendation it writes, validated."""
    import json
    import subprocess
    import sys

    from autotune.recommend import validate_recommendation

    out = tmp_path / "best.json"
    command = [sys.executable, "-m", "autotune", "run", spec, "--db", str(tmp_path / "a.db")]
    done = subprocess.run(
        [*command, "--out", str(out), *TINY_JOB], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(out.read_text())
    validate_recommendation(document)
    return document


@pytest.mark.slow
def test_a_trainer_script_is_tuned_and_its_trainer_trains_with_the_exports(
    tmp_path: Path,
) -> None:
    document = tune(f"{WORKLOADS / 'hf_trainer.py'}:make_trainer", tmp_path)
    assert document["workload"] == "hf_trainer"
    assert document["baseline"]["config"]["batch_size"] == 16  # as TrainingArguments set it
    for answer in (document, document["same_effective_batch"]):
        arguments = answer["exports"]["hf_training_arguments"]
        trainer = make_configured_trainer(tmp_path, **arguments, max_steps=2, disable_tqdm=True)
        assert trainer.args.per_device_train_batch_size == answer["config"]["batch_size"]
        assert trainer.args.dataloader_num_workers == answer["config"]["num_workers"]
        assert trainer.train().global_step == 2


@pytest.mark.slow
def test_a_lightning_script_is_tuned_and_its_trainer_fits_with_the_exports(
    tmp_path: Path,
) -> None:
    import importlib.util

    document = tune(f"{WORKLOADS / 'lit.py'}:make", tmp_path)
    assert document["workload"] == "lit"
    assert document["baseline"]["config"]["batch_size"] == 32  # the DataModule's DataLoader
    spec = importlib.util.spec_from_file_location("lit_module", WORKLOADS / "lit.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for answer in (document, document["same_effective_batch"]):
        exports = answer["exports"]
        data = script.ImagesData(**exports["dataloader"])
        trainer = L.Trainer(
            **exports["lightning_trainer"],
            max_steps=2,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            default_root_dir=str(tmp_path),
        )
        trainer.fit(script.Classifier(), datamodule=data)
        assert trainer.global_step == 2
        assert trainer.train_dataloader.batch_size == answer["config"]["batch_size"]
        assert trainer.train_dataloader.num_workers == answer["config"]["num_workers"]


def test_the_module_s_own_step_hooks_run_where_lightning_runs_them() -> None:
    loop = run_steps(lit("make_averaged"), Config(batch_size=32), steps=2)
    module = loop.model
    assert module.calls == [
        call
        for i in (0, 1)
        for call in (
            f"start {i}",
            "before_backward",
            "after_backward",
            "before_optimizer_step grads=True",
            "before_zero_grad grads=True",
            f"end {i} loss=True",
        )
    ]
    # The average the hook keeps moved with the weights.
    first = next(module.parameters())
    assert not torch.equal(module.average[0], first.detach())


def test_a_hook_that_needs_a_trainer_fails_naming_the_hook_and_the_fix() -> None:
    with pytest.raises(WorkloadError, match=r"AsksTheTrainer\.on_train_batch_end\(\) failed"):
        run_steps(lit("make_asking_the_trainer"), Config(batch_size=32), steps=1)
