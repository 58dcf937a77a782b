"""The framework's own trainer, given autotune's exports, against autotune's claim.

For a Hugging Face ``Trainer`` script and a Lightning script (benchmarks/workloads/
hf_bert_trainer.py and lit_images.py), ``autotune run`` tunes the script with default options
(or ``--time-budget``); then the framework's own ``trainer.train()`` / ``trainer.fit()`` runs
the script as written (the baseline) and with the recommendation applied through its exports
(``hf_training_arguments``; ``dataloader``, ``lightning_trainer``, ``optimizer`` and
``torch_compile`` for Lightning; ``environment`` for the process), interleaved for ``--rounds``
rounds, each run in a fresh process. A run lasts whole epochs, and its speed is its samples/s
(each batch's own samples) over those after the first, at least ``Framework.run_samples`` of
them: autotune's claim is a steady state of a run of whole epochs, each epoch's start (its
workers refilling their queues) at its share (see ``run_epochs``).
``benchmarks/frameworks_diagnose.py`` times autotune's trials beside the same runs.

Run it alone on the machine (it prints markdown for benchmarks/RESULTS.md)::

    flock -x /tmp/autotune-bench.lock python -m benchmarks.frameworks --rounds 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

WORKLOADS = Path(__file__).resolve().parent / "workloads"
#: Optimizer steps of each run left out of its speed: worker start-up and first allocations.
WARMUP_STEPS = 5


def run_steps(samples: int, samples_per_step: int) -> int:
    return max(samples // samples_per_step, WARMUP_STEPS + 20)


def run_epochs(samples: int, samples_per_step: int, epoch_steps: int) -> int:
    """Whole epochs a run lasts: the first, left out of its speed (start-up, see
    :func:`_steady`), then as many as hold ``run_steps`` steps, one at least. A run of many
    epochs pays every epoch's start (workers refilling their queues, or started afresh), and
    autotune's claim charges each its share, so a run timed within one epoch would not."""
    return 1 + max(1, math.ceil(run_steps(samples, samples_per_step) / epoch_steps))


@dataclass(frozen=True)
class Framework:
    name: str
    workload: str  # what ``autotune run`` is given
    #: Export sections a user applies to this framework's script, and the set_by_hand knobs
    #: this benchmark applies as the export says (the others are reported as not applied).
    section: str
    applied_by_hand: frozenset[str]
    #: The least samples a run times (after its first epoch): some seconds of it.
    run_samples: int


_ENVIRONMENT_KNOBS = frozenset({"retain_freed_memory", "intra_op_threads"})
FRAMEWORKS = {
    "hf": Framework(
        "transformers Trainer",
        f"{WORKLOADS / 'hf_bert_trainer.py'}:make_trainer",
        "hf_training_arguments",
        _ENVIRONMENT_KNOBS,
        2048,
    ),
    "lightning": Framework(
        "Lightning Trainer",
        f"{WORKLOADS / 'lit_images.py'}:make",
        "lightning_trainer",
        _ENVIRONMENT_KNOBS
        | {"batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers"}
        | {"in_order", "compile", "optimizer_impl", "channels_last"},
        12288,
    ),
}


# -- one run of the framework's own trainer, in its own process ---------------------------------


def _steady(
    stamps: list[float], samples: list[int], warmup_stamps: int, epochs: list[int] | None = None
) -> float:
    """Samples/s over a run's steps that ended at ``stamps`` with ``samples`` each (an epoch's
    last batch may be short): from the end of the first epoch when ``epochs`` (each step's)
    shows a later one (see :func:`run_epochs`), else from the end of step ``warmup_stamps``,
    to the last step's end."""
    first = warmup_stamps
    if epochs and epochs[-1] >= 1:
        first = epochs.index(1) - 1  # the first epoch's last step
    return sum(samples[first + 1 :]) / (stamps[-1] - stamps[first])


def _run_result(
    stamps: list[float],
    samples: list[int],
    warmup_stamps: int,
    started: float,
    epochs: list[int] | None = None,
) -> dict[str, Any]:
    """A run's speed, its seconds, and its steps' end times, samples and epochs (for
    benchmarks/frameworks_diagnose.py)."""
    return {
        "samples_per_s": _steady(stamps, samples, warmup_stamps, epochs),
        "train_s": time.perf_counter() - started,
        "stamps": [stamp - started for stamp in stamps],
        "samples": samples,
        "threads": torch.get_num_threads(),
        "epochs": epochs,
    }


def run_hf(exports: dict[str, Any], samples: int) -> dict[str, Any]:
    sys.path.insert(0, str(WORKLOADS))
    from hf_bert_trainer import NUM_SAMPLES, make_trainer
    from transformers import TrainerCallback

    class Stamps(TrainerCallback):
        """Each optimizer step's end, epoch and samples (an epoch's last batch is short)."""

        def __init__(self, per_step: int) -> None:
            self.per_step = per_step
            self.stamps: list[float] = []
            self.samples: list[int] = []
            self.epochs: list[int] = []
            self.in_epoch = 0

        def on_epoch_begin(self, *args: Any, **kwargs: Any) -> None:
            self.in_epoch = 0

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            self.stamps.append(time.perf_counter())
            self.epochs.append(len(self.epochs) and self.epochs[-1] + (self.in_epoch == 0))
            self.samples.append(min(self.per_step, NUM_SAMPLES - self.in_epoch * self.per_step))
            self.in_epoch += 1

    arguments = dict(exports.get("hf_training_arguments", {}))
    probe = make_trainer(**arguments).args  # the script's own batch when no export sets one
    per_step = probe.per_device_train_batch_size * probe.gradient_accumulation_steps
    epochs = run_epochs(samples, per_step, math.ceil(NUM_SAMPLES / per_step))
    trainer = make_trainer(**arguments, num_train_epochs=epochs, disable_tqdm=True)
    stamps = Stamps(per_step)
    trainer.add_callback(stamps)
    started = time.perf_counter()
    trainer.train()
    return _run_result(stamps.stamps, stamps.samples, WARMUP_STEPS, started, stamps.epochs)


def run_lightning(exports: dict[str, Any], samples: int) -> dict[str, Any]:
    sys.path.insert(0, str(WORKLOADS))
    import lightning as L
    import torch
    from lit_images import NUM_SAMPLES, Classifier, PhotosData

    class Stamps(L.Callback):
        def __init__(self) -> None:
            self.stamps: list[float] = []
            self.samples: list[int] = []
            self.epochs: list[int] = []

        def on_train_batch_end(
            self, trainer: Any, module: Any, out: Any, batch: Any, i: int
        ) -> None:
            self.stamps.append(time.perf_counter())
            self.samples.append(len(batch[1]))
            self.epochs.append(trainer.current_epoch)

    data = PhotosData(**exports.get("dataloader", {}))
    module: Any = Classifier(**exports.get("optimizer", {}))
    if "channels_last" in exports.get("set_by_hand", {}).get("lightning_trainer", {}):
        module = module.to(memory_format=torch.channels_last)
    if "torch_compile" in exports:
        module = torch.compile(module, **exports["torch_compile"])
    settings = exports.get("lightning_trainer", {})
    accumulation = settings.get("accumulate_grad_batches", 1)
    batch = data.loader["batch_size"]
    epoch_steps = math.ceil(math.ceil(NUM_SAMPLES / batch) / accumulation)
    stamps = Stamps()
    trainer = L.Trainer(
        **settings,
        max_epochs=run_epochs(samples, batch * accumulation, epoch_steps),
        callbacks=[stamps],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tempfile.mkdtemp(prefix="lit-images-"),
    )
    started = time.perf_counter()
    trainer.fit(module, datamodule=data)
    # A stamp per micro-batch: the warm-up counted in optimizer steps, as for the Trainer.
    warmup = WARMUP_STEPS * accumulation
    return _run_result(stamps.stamps, stamps.samples, warmup, started, stamps.epochs)


def framework_run(name: str, exports: dict[str, Any], samples: int) -> dict[str, Any]:
    """One run of ``name``'s trainer in a fresh process started with the exports' environment."""
    environment = {**os.environ, **exports.get("environment", {})}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.frameworks",
            "--child",
            name,
            "--run-samples",
            str(samples),
        ],
        input=json.dumps(exports),
        capture_output=True,
        text=True,
        env=environment,
        cwd=Path(__file__).resolve().parent.parent,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {name} run failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- the tune, the rounds, the table ---------------------------------------------------------


def tune(
    framework: Framework, folder: Path, time_budget: float | None
) -> tuple[dict[str, Any], float]:
    """``autotune run`` with default options; the recommendation and the seconds it took."""
    out = folder / "recommendation.json"
    command = [sys.executable, "-m", "autotune", "run", framework.workload, "--device", "cpu"]
    command += ["--db", str(folder / "autotune.db"), "--out", str(out), "--fresh"]
    if time_budget is not None:
        command += ["--time-budget", str(time_budget)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"autotune run failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text()), time.perf_counter() - started


def measure(
    key: str,
    time_budget: float | None,
    rounds: int,
    samples: int,
    recommendation: Path | None = None,
) -> dict[str, Any]:
    """Tune ``key``'s script (or take an earlier tune's ``recommendation``), then run its
    trainer interleaved."""
    framework = FRAMEWORKS[key]
    if recommendation is None:
        folder = Path(tempfile.mkdtemp(prefix=f"frameworks-{key}-"))
        document, tune_s = tune(framework, folder, time_budget)
    else:
        document, tune_s = json.loads(recommendation.read_text()), None
    exports = document["exports"]
    hand = exports.get("set_by_hand", {}).get(framework.section, {})
    runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "recommended": []}
    for _ in range(rounds):
        runs["baseline"].append(framework_run(key, {}, samples))
        runs["recommended"].append(framework_run(key, exports, samples))
    speeds = {side: [r["samples_per_s"] for r in each] for side, each in runs.items()}
    ratios = [r / b for b, r in zip(speeds["baseline"], speeds["recommended"], strict=True)]
    return {
        "framework": framework.name,
        "tune_s": tune_s,
        "trials": document["trials"]["total"],
        "baseline_config": document["baseline"]["config"],
        "config": document["config"],
        "claim": document["speedup"],
        "claimed_samples_per_s": {
            "baseline": document["baseline"]["metrics"]["samples_per_s"],
            "recommended": document["metrics"]["samples_per_s"],
        },
        "samples_per_s": speeds,
        "train_s": {side: [r["train_s"] for r in each] for side, each in runs.items()},
        "ratios": ratios,
        "seen": statistics.median(ratios),
        "not_applied": sorted(set(hand) - framework.applied_by_hand),
    }


def _changed(result: dict[str, Any]) -> str:
    base, config = result["baseline_config"], result["config"]
    return ", ".join(f"{k}={v}" for k, v in config.items() if base.get(k) != v) or "none"


def _minutes(seconds: float | None) -> str:
    return "earlier tune" if seconds is None else f"{seconds / 60:.1f} min"


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| framework | tune | recommendation (changed knobs) | trainer's samples/s, baseline"
        " -> recommended (median, range) | speedup seen (median, range) | autotune's claim"
        " | claim / seen |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        base, rec = r["samples_per_s"]["baseline"], r["samples_per_s"]["recommended"]
        lines.append(
            f"| {r['framework']} | {_minutes(r['tune_s'])}, {r['trials']} trials"
            f" | {_changed(r)} | {statistics.median(base):.0f} ({min(base):.0f}-{max(base):.0f})"
            f" -> {statistics.median(rec):.0f} ({min(rec):.0f}-{max(rec):.0f})"
            f" | {r['seen']:.2f}x ({min(r['ratios']):.2f}-{max(r['ratios']):.2f})"
            f" | {r['claim']:.2f}x | {r['claim'] / r['seen']:.2f} |"
        )
    return "\n".join(lines)


def _positive(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text} is not positive; give a number above 0")
        return value

    return parse


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=sorted(FRAMEWORKS), action="append")
    parser.add_argument(
        "--rounds", type=_positive(int), default=3, help="interleaved runs of each side"
    )
    parser.add_argument("--time-budget", type=_positive(float), help="seconds each tune may take")
    parser.add_argument(
        "--run-samples", type=_positive(int), help="samples a run trains on (a smoke run)"
    )
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument(
        "--recommendation",
        type=Path,
        action="append",
        help="an earlier tune's JSON (autotune run --out) instead of tuning, one per --framework",
    )
    parser.add_argument("--child", choices=sorted(FRAMEWORKS), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        run = run_hf if options.child == "hf" else run_lightning
        samples = options.run_samples or FRAMEWORKS[options.child].run_samples
        print(json.dumps(run(json.loads(sys.stdin.read()), samples)))
        return
    keys = options.framework or sorted(FRAMEWORKS)
    given = options.recommendation or []
    if given and len(given) != len(keys):
        parser.error(
            f"{len(given)} --recommendation for {len(keys)} frameworks; give one per "
            "--framework, in the same order"
        )
    results = []
    for index, key in enumerate(keys):
        samples = options.run_samples or FRAMEWORKS[key].run_samples
        earlier = given[index] if given else None
        results.append(measure(key, options.time_budget, options.rounds, samples, earlier))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    if options.json:
        options.json.write_text(json.dumps(results, indent=1))
    print(table(results))
    for r in results:
        if r["not_applied"]:
            print(f"\n{r['framework']}: set_by_hand not applied: {', '.join(r['not_applied'])}")


if __name__ == "__main__":
    main()
