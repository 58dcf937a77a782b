"""``python -m benchmarks.peer``: autotune side by side with pytorch-autotune 2.0 on a GPU.

pytorch-autotune (MIT, on PyPI) measures precision x ``torch.compile`` mode (CUDA graphs
included) x memory format x fused optimizer on one example batch already on the GPU. Its three
benchmark models at its shapes (``benchmarks/workloads/peer_models.py``: ResNet-18 at 32 px
batch 128, ResNet-50 at 224 px batch 64, a 6-layer transformer at 128 tokens batch 32) are
tuned by both, each within the same wall-clock budget (the peer's ``balanced``, 360 s, by
default): the peer's ``autotune()`` in a fresh process with its cache off, and ``autotune
run`` with ``--time-budget`` on the model's in-memory dataset. Then the two picks, and
PyTorch's defaults at the peer's batch, are re-measured through autotune's trial runner
(fresh processes, the confirmation's window, the order rotated round by round) in one session.
The peer's pick is translated knob for knob (``tf32`` precision: TF32 and cuDNN's benchmark on,
as the peer sets them; ``fused``: ``optimizer_impl=fused``) at its own batch.

Reported per model: each side's pick and tuning wall time, and each configuration's median
samples/s over the rounds with its spread (CV and range) and its ratio to the peer's pick.
Markdown on stdout; the peer's reports, autotune's recommendations and databases, and every
run land in ``--out``. CUDA only (the peer tunes on CUDA only). Each model takes about twice
the budget plus the re-measurement (some 15 minutes at ``balanced``): on a machine lent for
minutes run one model a call, or ``--budget fast``.

pytorch-autotune is not a dependency: install it first (``pip install
pytorch-autotune==2.0.0``; where the machine reaches no index, carry its wheel, downloaded
with ``pip download --no-deps pytorch-autotune==2.0.0 -d .whl``).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from autotune.runner import TrialLauncher, run_trial
from autotune.space import Config
from autotune.store import TrialRecord
from autotune.tuner import TuneOptions
from benchmarks._harness import cv, interleave, log, run_module

MODELS = ("resnet18", "resnet50", "transformer")
MODELS_FILE = "benchmarks/workloads/peer_models.py"
#: The peer's budgets (``pytorch_autotune.tuner._BUDGETS_S``).
BUDGETS_S = {"fast": 120, "balanced": 360, "max": 900}
TRIAL_TIMEOUT_S = 600.0


def peer_config(pick: dict[str, Any], batch_size: int) -> Config:
    """The peer's ``TrialConfig`` as autotune's configuration at the peer's batch.

    Example:
        >>> peer_config({"precision": "amp_bf16", "compile": "reduce-overhead",
        ...              "channels_last": True, "fused_opt": True}, 128).amp
        'bf16'
    """
    precision = pick["precision"]
    flags = precision != "fp32_default"  # the peer turns TF32 and cuDNN's benchmark on
    return Config.model_validate(
        {
            "batch_size": batch_size,
            "amp": {"amp_bf16": "bf16", "amp_fp16": "fp16"}.get(precision, "off"),
            "tf32": True if flags else None,
            "cudnn_benchmark": flags,
            "compile": pick["compile"],
            "channels_last": pick["channels_last"],
            "optimizer_impl": "fused" if pick["fused_opt"] else "default",
        }
    )


def tune_peer(model: str, device: str, budget: str | int, out: Path) -> dict[str, Any]:
    log(f"{model}: pytorch-autotune's autotune(), budget {budget}")
    seconds = BUDGETS_S[budget] if isinstance(budget, str) else budget
    answer = run_module(
        "benchmarks._peer_tune",
        {"model": model, "device": device, "budget": budget},
        timeout_s=2 * seconds + 600,
    )
    (out / f"{model}-peer.json").write_text(json.dumps(answer, indent=2))
    if answer["outcome"] != "ok":
        raise SystemExit(f"{model}: pytorch-autotune failed: {answer.get('error')}")
    return answer


def tune_autotune(model: str, device: str, seconds: int, out: Path) -> dict[str, Any]:
    log(f"{model}: autotune run, --time-budget {seconds}")
    command = [
        sys.executable,
        "-m",
        "autotune",
        "run",
        f"{MODELS_FILE}:{model}",
        "--device",
        device,
        "--time-budget",
        str(seconds),
        "--db",
        str(out / f"{model}-autotune.db"),
        "--out",
        str(out / f"{model}-autotune.json"),
        "--fresh",
    ]
    started = time.perf_counter()
    with (out / f"{model}-autotune.log").open("w") as stderr:
        finished = subprocess.run(command, stderr=stderr, stdout=subprocess.DEVNULL)
    wall_s = time.perf_counter() - started
    if finished.returncode != 0:
        raise SystemExit(f"{model}: autotune run exited {finished.returncode}; see {stderr.name}")
    document = json.loads((out / f"{model}-autotune.json").read_text())
    return {"document": document, "wall_s": wall_s}


def _measured(model: str, config: Config, device: str, plan: Any) -> TrialRecord:
    record = run_trial(
        f"{MODELS_FILE}:{model}",
        config,
        device,
        plan,
        TRIAL_TIMEOUT_S,
        budget_is_host_memory=False,
    )
    log(f"{model}: {record.outcome}, {record.samples_per_s or 0:,.1f} samples/s")
    return record


def remeasure(
    model: str, configs: dict[str, Config], device: str, rounds: int
) -> dict[str, list[TrialRecord]]:
    plan = TuneOptions(workload=f"{MODELS_FILE}:{model}").confirm_plan()
    with TrialLauncher(f"{MODELS_FILE}:{model}", device):
        arms = {
            name: functools.partial(_measured, model, config, device, plan)
            for name, config in configs.items()
        }
        return interleave(arms, rounds)


def rows(
    model: str,
    configs: dict[str, Config],
    runs: dict[str, list[TrialRecord]],
    walls: dict[str, float | None],
) -> list[str]:
    rates = {
        name: [r.samples_per_s for r in records if r.outcome == "ok" and r.samples_per_s]
        for name, records in runs.items()
    }
    peer = statistics.median(rates["pytorch-autotune"]) if rates["pytorch-autotune"] else None
    lines = []
    for name, config in configs.items():
        mine = rates[name]
        if not mine:
            failed = next(iter(runs[name]), None)
            lines.append(
                f"| {model} | {name} | {_shown(config)} | - | failed: "
                f"{failed.error if failed else '?'} | - | - | - |"
            )
            continue
        median = statistics.median(mine)
        spread = cv(mine)
        wall = walls.get(name)
        lines.append(
            f"| {model} | {name} | {_shown(config)} | "
            f"{'-' if wall is None else f'{wall:.0f} s'} | {median:,.1f} | "
            f"{'-' if spread is None else f'{spread:.1%}'} | {min(mine):,.1f}-{max(mine):,.1f} | "
            f"{'-' if not peer else f'{median / peer:.2f}x'} |"
        )
    return lines


def _shown(config: Config) -> str:
    defaults = Config()
    changed = {
        name: value
        for name, value in config.public_dict().items()
        if value != getattr(defaults, name) and name != "batch_size"
    }
    return f"bs {config.batch_size}" + "".join(f", {k}={v}" for k, v in changed.items())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.peer",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--model", action="append", choices=MODELS, default=None)
    parser.add_argument(
        "--budget", default="balanced", help="fast, balanced, max or seconds, for both tuners"
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("/tmp/autotune-peer"))
    args = parser.parse_args(argv)
    if not args.device.startswith("cuda"):
        parser.error("--device must be cuda or cuda:N: pytorch-autotune tunes on CUDA only")
    budget: str | int = args.budget if args.budget in BUDGETS_S else int(args.budget)
    seconds = BUDGETS_S[budget] if isinstance(budget, str) else budget
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {args.device}, budget {budget} "
        f"({seconds} s) for each tuner, {args.rounds} interleaved rounds\n"
    )
    print(
        "| model | configuration of | knobs | tuning wall time | samples/s (median) | CV "
        "| range | / pytorch-autotune |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for model in args.model or MODELS:
        peer = tune_peer(model, args.device, budget, args.out)
        ours = tune_autotune(model, args.device, seconds, args.out)
        configs = {
            "PyTorch defaults": Config(batch_size=peer["batch_size"]),
            "pytorch-autotune": peer_config(peer["config"], peer["batch_size"]),
            "autotune": Config.model_validate(ours["document"]["config"]),
        }
        runs = remeasure(model, configs, args.device, args.rounds)
        (args.out / f"{model}-remeasured.json").write_text(
            json.dumps({k: [r.model_dump(mode="json") for r in v] for k, v in runs.items()})
        )
        walls = {"pytorch-autotune": peer["wall_s"], "autotune": ours["wall_s"]}
        for line in rows(model, configs, runs, walls):
            print(line, flush=True)


if __name__ == "__main__":
    main()
