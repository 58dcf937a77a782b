"""The optimizer's implementation: the user's own optimizer rebuilt with ``foreach`` or ``fused``.

PyTorch's optimizers step in one of three ways: a Python loop over the parameters, ``foreach``
(one multi-tensor kernel per operation, over every parameter at once) or ``fused`` (one kernel
for the whole update). Which one is the default depends on the class, the device and the
tensors; ``optimizer_impl`` asks for one. The optimizer the workload builds is rebuilt with the
same class, parameter groups and hyper-parameters, and only the implementation flag changed,
before any step has made state that would be lost.
"""

from __future__ import annotations

import inspect

import torch

from autotune.workload import Workload

#: The implementation flags of ``torch.optim`` classes, as ``optimizer_impl`` names them.
IMPLEMENTATIONS = ("foreach", "fused")


def takes_flag(optimizer_class: type, flag: str) -> bool:
    """Whether the class's constructor takes ``flag`` (``foreach`` or ``fused``) by name."""
    try:
        parameters = inspect.signature(optimizer_class.__init__).parameters  # type: ignore[misc]
    except (TypeError, ValueError):
        return False
    return flag in parameters


def with_implementation(optimizer: torch.optim.Optimizer, impl: str) -> torch.optim.Optimizer:
    """``optimizer`` rebuilt with ``impl`` (``foreach`` or ``fused``), or itself for ``default``.

    Every parameter group keeps its parameters and hyper-parameters; only ``foreach`` and
    ``fused`` change (the one chosen on, the other off, as PyTorch refuses both). Call it
    before the first step: the optimizer's state is not carried over.

    Example:
        >>> import torch
        >>> weight = torch.nn.Parameter(torch.zeros(2))
        >>> sgd = torch.optim.SGD([{"params": [weight], "lr": 0.5}], lr=0.1, momentum=0.9)
        >>> fused = with_implementation(sgd, "fused")
        >>> fused.param_groups[0]["lr"], fused.param_groups[0]["momentum"], fused.defaults["fused"]
        (0.5, 0.9, True)
    """
    if impl == "default":
        return optimizer
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"optimizer_impl {impl!r} is not one of default, foreach, fused")
    cls = type(optimizer)
    if not takes_flag(cls, impl):
        raise ValueError(f"{cls.__name__} does not take {impl}=True; set optimizer_impl to default")
    if _has_stepped(optimizer):
        raise ValueError(
            "the optimizer has stepped already; set its implementation before the first step "
            "(its state would be lost)"
        )
    flags = {flag: flag == impl for flag in IMPLEMENTATIONS if takes_flag(cls, flag)}
    groups = [{**group, **flags} for group in optimizer.param_groups]
    defaults = {name: value for name, value in optimizer.defaults.items() if name != "params"}
    constructor = inspect.signature(cls.__init__).parameters
    keywords = {name: value for name, value in defaults.items() if name in constructor}
    return cls(groups, **{**keywords, **flags})


def _has_stepped(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer`` holds state a rebuild would lose. Some classes (Adagrad) make
    their state when built, with the step count at 0: rebuilding makes the same again."""
    for state in optimizer.state.values():
        step = state.get("step")
        if step is None or float(step) != 0:
            return True
    return False


def supported_implementations(
    workload: Workload, device: torch.device
) -> tuple[str, tuple[str, ...]]:
    """The workload's optimizer class name and the implementations besides ``default`` it
    takes and steps with on ``device``, found by building it over one parameter there and
    stepping each rebuilt one once. ``("", ())`` when the workload's optimizer cannot be
    built that way."""
    try:
        probe = workload.optimizer([_throwaway_parameter(device)])
    except Exception:
        return "", ()
    working = tuple(impl for impl in IMPLEMENTATIONS if _steps_with(probe, impl, device))
    return type(probe).__name__, working


def _throwaway_parameter(device: torch.device) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.zeros(4, device=device))


def _steps_with(optimizer: torch.optim.Optimizer, impl: str, device: torch.device) -> bool:
    """Whether ``optimizer`` rebuilt with ``impl`` takes a step over its (throwaway)
    parameters: a class, device or dtype that refuses the implementation raises."""
    if not takes_flag(type(optimizer), impl):
        return False
    try:
        rebuilt = with_implementation(optimizer, impl)
        for group in rebuilt.param_groups:
            for parameter in group["params"]:
                parameter.grad = torch.ones_like(parameter)
        rebuilt.step()
    except Exception:
        return False
    return True
