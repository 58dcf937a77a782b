"""Answers remembered: a job that already answered the same question on the same kind of device.

A job's *answer key* names the question it answered: the workload's source, the options that
shape the recommendation, and the device and software it ran on. A new job with the key of a
succeeded one would measure the same thing again, so ``autotune run`` and ``POST /v1/jobs``
answer with the earlier job instead, unless asked to measure afresh.
"""

from __future__ import annotations

import ast
import hashlib
import json
import platform
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any

import torch
from sqlalchemy import select

import autotune  # its __version__ is read when a key is made: it is set after this import
from autotune.errors import AutotuneError
from autotune.measure import device_identity
from autotune.store import Database, Job
from autotune.tuner._options import TuneOptions
from autotune.workload import WorkloadRef, parse_ref

#: Options that do not change the answer: where the job runs is in the key's device part
#: (``device`` and ``device_class``), and ``on_new_hardware`` only decides what happens to a
#: job resumed elsewhere. The CLI's own options (``--db``, ``--out``, ``--resume``, ``--job``,
#: ``--json``, ``--quiet``) are not job options at all.
_OPTIONS_NOT_IN_THE_ANSWER = frozenset({"device", "device_class", "on_new_hardware"})


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sibling_modules(source: Path) -> dict[str, str]:
    """The digests of the ``.py`` modules in ``source``'s folder that it imports, by file name.

    One level only: what those modules import in turn is not followed. An import names a
    sibling when ``import name``, ``from name import ...`` or ``from . import name`` (or
    ``from .name import ...``) finds ``name.py`` or ``name/__init__.py`` beside ``source``.
    A file that does not parse has no siblings here; loading it fails with the reason.
    """
    try:
        tree = ast.parse(source.read_bytes(), filename=str(source))
    except (SyntaxError, ValueError):
        return {}
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.module is not None and node.level <= 1:
                names.add(node.module.split(".")[0])
            elif node.module is None and node.level == 1:
                names.update(alias.name for alias in node.names)
    folder = source.parent
    found: dict[str, str] = {}
    for name in sorted(names):
        for candidate in (folder / f"{name}.py", folder / name / "__init__.py"):
            if candidate.is_file() and candidate != source:
                found[str(candidate.relative_to(folder))] = _digest(candidate.read_bytes())
                break
    return found


def _source_identity(source: Path) -> dict[str, Any]:
    return {"source": _digest(source.read_bytes()), "imports": _sibling_modules(source)}


def _module_file(dotted: str) -> Path | None:
    """The file of module ``dotted``, found on ``sys.path`` without importing any package."""
    locations: list[str] | None = None
    spec = None
    parts = dotted.split(".")
    for depth in range(1, len(parts) + 1):
        spec = PathFinder.find_spec(".".join(parts[:depth]), locations)
        if spec is None:
            return None
        locations = list(spec.submodule_search_locations or [])
    if spec is None or spec.origin is None or not Path(spec.origin).is_file():
        return None
    return Path(spec.origin)


def workload_identity(ref: WorkloadRef) -> dict[str, Any]:
    """What makes a workload the same one: its source, not where it lies.

    A file: its content, and that of the modules it imports from its own folder (see
    :func:`_sibling_modules`). A module: the same, for the module's file, found without
    importing it. A built-in: its name and autotune's version, which ships its code. The
    function's name is part of it: two functions of one file are two workloads.
    """
    identity: dict[str, Any] = {"kind": ref.kind, "function": ref.attribute}
    if ref.kind == "builtin":
        return {**identity, "name": ref.target, "autotune": autotune.__version__}
    path = Path(ref.target) if ref.kind == "file" else _module_file(ref.target)
    if path is None:  # not found: loading it fails, so no succeeded job can share the key
        return {**identity, "unresolved": ref.target}
    return {**identity, **_source_identity(path)}


def _cudnn_version() -> int | None:
    cudnn = torch.backends.cudnn
    return cudnn.version() if cudnn.is_available() else None


def device_part(options: TuneOptions) -> dict[str, Any]:
    """The device and software a job's answer holds for.

    The device class (``cuda: <GPU name>``, ``cpu: <CPU model>, N cores``) and the versions of
    torch, CUDA, cuDNN, Python and autotune: the comparable part of the measurements'
    fingerprint (:func:`autotune.measure.comparable_identity`) as far as it is known without a
    trial process, since the full fingerprint reads the device from inside one. The class is
    the job's own ``device_class`` where it names one, else that of ``options.device`` on this
    host; the versions are this process's (a service and its workers share one install).
    """
    device_class = options.device_class or device_identity(options.device).device_class
    return {
        "device_class": device_class,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": _cudnn_version(),
        "python": platform.python_version(),
        "autotune": autotune.__version__,
    }


def answer_key(options: TuneOptions) -> str:
    """The sha256 naming the question a job with ``options`` answers on this device.

    Example:
        >>> a = TuneOptions(workload="builtin:image-cnn", n_trials=5, device="cpu")
        >>> answer_key(a) == answer_key(a.model_copy(update={"on_new_hardware": "refuse"}))
        True
        >>> answer_key(a) == answer_key(a.model_copy(update={"n_trials": 6}))
        False
    """
    shaping = options.model_dump(mode="json", exclude=set(_OPTIONS_NOT_IN_THE_ANSWER))
    del shaping["workload"]
    # One rank on a host to itself is what every job measured before these options: its
    # answers keep their keys.
    if shaping.get("nproc_per_node") == 1 and shaping.get("host_share") in (None, 1):
        shaping.pop("nproc_per_node", None)
        shaping.pop("host_share", None)
    question = {
        "workload": workload_identity(parse_ref(options.workload)),
        "options": shaping,
        "device": device_part(options),
    }
    return _digest(json.dumps(question, sort_keys=True).encode())


def remembered_answer(db: Database, options: TuneOptions) -> Job | None:
    """The newest succeeded job that answered the same question, or None.

    The same question: the same :func:`answer_key` (the workload's source, the options that
    shape the answer, the device class and software). The job is detached from its session.
    None too where the question cannot be named here (a device this host lacks, a workload
    that cannot be found): running the job then says why, or a worker that has them runs it.
    """
    try:
        key = answer_key(options)
    except AutotuneError:
        return None
    with db.session() as session:
        answered = session.scalars(
            select(Job)
            .where(Job.answer_key == key, Job.status == "succeeded")
            .order_by(Job.finished_at.desc(), Job.id.desc())
        )
        job = next((job for job in answered if job.recommendation is not None), None)
        if job is not None:
            session.expunge(job)
        return job
