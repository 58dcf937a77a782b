"""torch.compile in a trial: whether it can run here, fresh caches, and timing compilation.

Compilation happens on the model's first call (and again on a change of shapes, which
``drop_last=True`` avoids). Its cost is measured as the wall time of the steps that compiled
beyond an ordinary step, apart from the steady state, so that a job can charge it against the
length of the user's run instead of hiding it in warm-up.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator

import torch

#: Steps that may still compile (the first call, and a recompilation it triggers) before
#: compilation is taken as finished.
MAX_COMPILING_STEPS = 8


def inductor_cxx() -> str:
    """The C++ compiler inductor runs for its CPU kernels: ``$CXX``, else ``g++`` (``clang++``
    on macOS), as ``torch._inductor.config.cpp.cxx`` names it."""
    try:
        from torch._inductor import config
    except ImportError:
        return os.environ.get("CXX", "clang++" if sys.platform == "darwin" else "g++")
    names = config.cpp.cxx if isinstance(config.cpp.cxx, (list, tuple)) else (config.cpp.cxx,)
    return next((str(name) for name in reversed(names) if name), "g++")


def compile_unavailable(device_type: str) -> str | None:
    """Why ``torch.compile`` cannot run here for a ``device_type`` model, or None if it can.

    The reason, which follows the knob's name in messages ("compile needs ..."), names what is
    missing: a C++ compiler for inductor's generated code, Triton for its GPU kernels, or a
    Python that torch accepts.
    """
    try:
        from torch._dynamo.eval_frame import check_if_dynamo_supported
    except ImportError as exc:
        return f"cannot run: torch {torch.__version__} cannot import torch._dynamo ({exc})"
    try:
        check_if_dynamo_supported()
    except RuntimeError as exc:
        return f"cannot run: torch refuses this Python ({exc})"
    cxx = inductor_cxx()
    if shutil.which(cxx) is None:
        return (
            f"needs a C++ compiler for inductor's generated code, and {cxx!r} is not on "
            "PATH; install g++ (or set CXX to a compiler)"
        )
    if device_type == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            return "needs Triton for inductor's GPU kernels; install the triton torch requires"
    return None


@contextlib.contextmanager
def fresh_compile_caches() -> Iterator[None]:
    """Inductor's and Triton's caches in a new, empty folder for the duration.

    Every compiled trial then compiles from scratch, as a user's first run does: a cache warmed
    by an earlier trial would make the same configuration look cheaper the second time.
    """
    names = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
    saved = {name: os.environ.get(name) for name in names}
    with tempfile.TemporaryDirectory(prefix="autotune-compile-") as folder:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(folder, "inductor")
        os.environ["TRITON_CACHE_DIR"] = os.path.join(folder, "triton")
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def compilations() -> int:
    """How many compilation phases torch has timed in this process so far: it grows during a
    step that compiled (a graph, its backward, a recompilation) and only then."""
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:
        return 0
    return sum(len(times) for times in compilation_time_metrics.values())
