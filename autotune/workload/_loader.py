"""Finding a workload from its command-line reference and checking it keeps the contract."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import cast

from autotune.errors import WorkloadError
from autotune.workload._contract import MODEL_INPUTS, Workload
from autotune.workload.frameworks import as_workload

DEFAULT_ATTRIBUTE = "workload"
BUILTIN_PREFIX = "builtin:"
_FORMS = "path/to/file.py, path/to/file.py:FUNCTION, package.module:FUNCTION or builtin:NAME"


@dataclass(frozen=True)
class WorkloadRef:
    """A parsed workload reference: a builtin name, a file, or a module, plus the function."""

    kind: str  # "builtin", "file" or "module"
    target: str
    attribute: str = DEFAULT_ATTRIBUTE

    def __str__(self) -> str:
        if self.kind == "builtin":
            return f"{BUILTIN_PREFIX}{self.target}"
        return f"{self.target}:{self.attribute}"


def builtin_names() -> list[str]:
    from autotune.workload.builtins import BUILTINS

    return sorted(BUILTINS)


def parse_ref(spec: str) -> WorkloadRef:
    """Parse ``spec`` and check what can be checked without importing user code."""
    spec = spec.strip()
    if not spec:
        raise WorkloadError(f"the workload reference is empty; pass {_FORMS}")
    if spec.startswith(BUILTIN_PREFIX):
        name = spec.removeprefix(BUILTIN_PREFIX)
        if name not in builtin_names():
            raise WorkloadError(
                f"unknown built-in workload {name!r}; choose one of "
                f"{', '.join(builtin_names())} (see `autotune workloads`)"
            )
        return WorkloadRef("builtin", name)
    target, _, attribute = spec.rpartition(":") if _has_attribute(spec) else (spec, "", "")
    attribute = attribute or DEFAULT_ATTRIBUTE
    if target.endswith(".py") or "/" in target or target.startswith("."):
        path = Path(target).expanduser()
        if not path.is_file():
            raise WorkloadError(
                f"workload file {target!r} does not exist; check the path (forms: {_FORMS})"
            )
        return WorkloadRef("file", str(path.resolve()), attribute)
    if not all(part.isidentifier() for part in target.split(".")):
        raise WorkloadError(f"{spec!r} is not a workload reference; pass {_FORMS}")
    return WorkloadRef("module", target, attribute)


def _has_attribute(spec: str) -> bool:
    # "C:\\x.py" style drive letters do not occur on the platforms we support; a colon
    # separates the function name.
    return ":" in spec


def _import_file(path: str) -> ModuleType:
    module_name = f"autotune_user_workload_{abs(hash(path))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"cannot import {path!r} as Python; name a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    # Let the user's file import its neighbours, as `python file.py` would.
    sys.path.insert(0, str(Path(path).parent))
    spec.loader.exec_module(module)
    return module


def _describe_import_failure(ref: WorkloadRef, exc: BaseException) -> str:
    where = Path(ref.target).name if ref.kind == "file" else ref.target
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return (
        f"workload {where!r} failed to import: {type(exc).__name__}: {first_line}; fix the "
        "error or install what it needs (run with --debug for the traceback)"
    )


#: Workload functions imported ahead of time by :func:`preload_workload` (in the fork server,
#: whose trial processes then find the module imported).
_PRELOADED: dict[WorkloadRef, Callable[[], object]] = {}


def preload_workload(spec: str) -> None:
    """Import the module behind ``spec`` once, for every later :func:`load_workload` of it.

    Only the trial fork server calls this: its forked trials then pay no import, and each gets
    the module as freshly imported, since the server never calls the workload function.
    """
    ref = parse_ref(spec)
    _PRELOADED[ref] = load_factory(ref)


def load_factory(ref: WorkloadRef) -> Callable[[], object]:
    """Import the module behind ``ref`` and return its workload function."""
    if ref in _PRELOADED:
        return _PRELOADED[ref]
    if ref.kind == "builtin":
        from autotune.workload.builtins import BUILTINS

        return BUILTINS[ref.target]
    try:
        module = (
            _import_file(ref.target) if ref.kind == "file" else importlib.import_module(ref.target)
        )
    except WorkloadError:
        raise
    except ModuleNotFoundError as exc:
        if ref.kind == "module" and exc.name == ref.target.split(".")[0]:
            raise WorkloadError(
                f"no module named {ref.target!r}; install it or pass a file path ({_FORMS})"
            ) from exc
        raise WorkloadError(_describe_import_failure(ref, exc)) from exc
    except Exception as exc:
        raise WorkloadError(_describe_import_failure(ref, exc)) from exc
    factory = getattr(module, ref.attribute, None)
    if factory is None:
        where = Path(ref.target).name if ref.kind == "file" else ref.target
        raise WorkloadError(
            f"{where} has no function {ref.attribute!r}; define `def {ref.attribute}() -> "
            f"autotune.Workload` there or name another with {where}:FUNCTION"
        )
    if not callable(factory):
        raise WorkloadError(
            f"{ref} is a {type(factory).__name__}, not a function returning a "
            "Workload; make it a function"
        )
    return cast(Callable[[], object], factory)


def load_workload(spec: str | WorkloadRef) -> Workload:
    """Import and call the workload function; check that it returned a :class:`Workload`."""
    ref = parse_ref(spec) if isinstance(spec, str) else spec
    factory = load_factory(ref)
    try:
        workload = factory()
    except Exception as exc:
        raise WorkloadError(
            f"{ref}() raised {type(exc).__name__}: {exc}; fix the workload function "
            "(run with --debug for the traceback)"
        ) from exc
    if not isinstance(workload, Workload):
        try:
            adapted = as_workload(workload)
        except WorkloadError as exc:
            raise WorkloadError(f"{ref}(): {exc}") from exc
        if adapted is None:
            raise WorkloadError(
                f"{ref}() returned {type(workload).__name__}, expected autotune.Workload, a "
                "transformers Trainer or (LightningModule, LightningDataModule); return "
                "Workload(model=..., dataset=..., loss=..., optimizer=...)"
            )
        workload = adapted
    for field_name in ("model", "dataset", "loss", "optimizer"):
        if field_name == "loss" and workload.loss is None:
            continue  # the model returns its own loss
        if not callable(getattr(workload, field_name)):
            raise WorkloadError(
                f"{ref}(): Workload.{field_name} is not callable; pass a function or module"
            )
    if workload.model_inputs not in MODEL_INPUTS:
        raise WorkloadError(
            f"{ref}(): Workload.model_inputs {workload.model_inputs!r} is not one of "
            f'{", ".join(MODEL_INPUTS)}; use "auto" to pass a dict as keyword arguments'
        )
    if (
        isinstance(workload.batch_size, bool)
        or not isinstance(workload.batch_size, int)
        or workload.batch_size < 1
    ):
        raise WorkloadError(
            f"{ref}(): Workload.batch_size {workload.batch_size!r} is not a positive whole "
            "number; pass the batch size you train with today, e.g. 32"
        )
    if workload.name is None:
        workload.name = ref.target if ref.kind != "file" else Path(ref.target).stem
    return workload
