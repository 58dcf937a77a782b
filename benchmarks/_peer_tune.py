"""One run of pytorch-autotune's ``autotune()`` in a fresh process, for ``benchmarks.peer``.

Reads one JSON request on stdin (``model``: a name in ``peer_models.MODELS``, ``device``,
``budget``: the peer's budget name or seconds) and answers one JSON line on stdout: the
peer's pick, its own step times, and the wall time of its search. Its cache is off, so the
search runs in full.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

MODELS_FILE = Path(__file__).resolve().parent / "workloads" / "peer_models.py"


def peer_models() -> ModuleType:
    spec = importlib.util.spec_from_file_location("peer_models", MODELS_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def tune(request: dict[str, Any]) -> dict[str, Any]:
    try:
        from pytorch_autotune import autotune
    except ImportError:
        return {
            "outcome": "error",
            "error": "pytorch_autotune is not installed; pip install pytorch-autotune==2.0.0 "
            "(on a machine without an index, carry its wheel and install it with --no-index)",
        }
    models = peer_models()
    peer = models.MODELS[request["model"]]
    model = peer.build()
    batch = models.example_batch(request["model"], request["device"])
    budget = request["budget"]
    started = time.perf_counter()
    result = autotune(
        model,
        batch,
        loss_fn=peer.loss,
        optimizer="adamw",
        lr=models.LR,
        budget=budget if isinstance(budget, str) else int(budget),
        device=request["device"],
        cache=False,
        verbose=False,
    )
    wall_s = time.perf_counter() - started
    report = result.report.to_dict()
    return {
        "outcome": "ok",
        "config": result.config.to_dict(),
        "wall_s": wall_s,
        "batch_size": peer.batch,
        "report": report,
    }


def main() -> None:
    request = json.loads(sys.stdin.read())
    print(json.dumps(tune(request)), flush=True)


if __name__ == "__main__":
    main()
