"""CUDA graphs in a trial: whether the workload's step suits ``torch.compile``'s graph modes.

``reduce-overhead`` and ``max-autotune`` record the compiled step as CUDA graphs and replay
them, which launches a whole step at once but holds every shape fixed. A workload whose batches
change shape, or whose step breaks or is refused capture, cannot use them: the trial ends with
:class:`UnsuitedValue`, whose message names the knob's value and why, and the job sets that
value aside instead of measuring it again (see ``autotune.search.InfeasibleSet``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from autotune.space import CUDA_GRAPH_MODES, Config

#: Words of an exception that CUDA graphs raised (capture refused, an output overwritten by a
#: later replay, inductor's refusal to skip them under ``cudagraph_or_error``).
_GRAPH_FAILURE_WORDS = ("cudagraph", "cuda graph", "stream is capturing", "stream capture")


class UnsuitedValue(Exception):
    """A knob's value that this workload's step cannot use; the job sets it aside.

    The message starts with ``KNOB=VALUE``, which is how the search knows what to set aside.
    """

    def __init__(self, knob: str, value: Any, reason: str) -> None:
        super().__init__(
            f"{knob}={value} does not suit this workload: {reason}; it is set aside for the "
            "rest of the job"
        )
        self.knob = knob
        self.value = value


def uses_cuda_graphs(config: Config) -> bool:
    """Whether the configuration's compile mode replays the step as CUDA graphs."""
    return config.compile in CUDA_GRAPH_MODES


def _shapes(batch: Any) -> tuple[Any, ...]:
    """The shapes of every tensor in a (nested) batch, in order."""
    if isinstance(batch, torch.Tensor):
        return (tuple(batch.shape),)
    if isinstance(batch, dict):
        return tuple(s for key in sorted(batch, key=str) for s in _shapes(batch[key]))
    if isinstance(batch, (list, tuple)):
        return tuple(s for item in batch for s in _shapes(item))
    return ()


class GraphWatch:
    """Watches a trial whose compile mode uses CUDA graphs; does nothing for other modes.

    ``reduce-overhead`` exists only for its graphs, so there inductor is told to raise where it
    would skip them (``cudagraph_or_error``): running it as ``default`` would only repeat that
    measurement. ``max-autotune`` keeps its tuned kernels without graphs, and is left to run.
    """

    def __init__(self, config: Config) -> None:
        self.mode = config.compile if uses_cuda_graphs(config) else None
        self._first_shapes: tuple[Any, ...] | None = None
        if self.mode == "reduce-overhead":
            with contextlib.suppress(ImportError, AttributeError):
                from torch._inductor import config as inductor

                inductor.triton.cudagraph_or_error = True

    def begin_step(self) -> None:
        """Tell CUDA graphs a new training step begins: the last step's outputs may be
        overwritten (the loop has read its loss by then)."""
        if self.mode is not None:
            torch.compiler.cudagraph_mark_step_begin()

    def saw(self, batch: Any) -> None:
        """Raise :class:`UnsuitedValue` when ``batch``'s shapes differ from the first's."""
        if self.mode is None:
            return
        shapes = _shapes(batch)
        if self._first_shapes is None:
            self._first_shapes = shapes
        elif shapes != self._first_shapes:
            raise UnsuitedValue(
                "compile",
                self.mode,
                f"its batches change shape ({_shown(self._first_shapes)}, then "
                f"{_shown(shapes)}) and CUDA graphs replay one shape; pad every batch to one "
                "shape (e.g. a fixed sequence length) to use it",
            )

    @contextlib.contextmanager
    def failures_explained(self) -> Iterator[None]:
        """Turn an error that CUDA graphs raised into :class:`UnsuitedValue`."""
        try:
            yield
        except UnsuitedValue:
            raise
        except Exception as exc:
            if self.mode is None or not _graph_failure(exc):
                raise
            raise UnsuitedValue(
                "compile", self.mode, f"the step fails under CUDA graphs ({_graph_line(exc)})"
            ) from exc


def _graph_failure(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(word in text for word in _GRAPH_FAILURE_WORDS)


def _graph_line(exc: BaseException) -> str:
    """The line of the exception's message about CUDA graphs, cut to one short clause."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    about = [line for line in lines if any(w in line.lower() for w in _GRAPH_FAILURE_WORDS)]
    line = (about or lines or [type(exc).__name__])[0].rstrip(".;")
    return line if len(line) <= 200 else line[:200] + "..."


def _shown(shapes: tuple[Any, ...]) -> str:
    return ", ".join("x".join(map(str, shape)) or "scalar" for shape in shapes[:4])
