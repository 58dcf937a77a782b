"""The knobs: their possible values and when each can change anything on a device."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autotune.space._facts import DeviceInfo, WorkloadInfo

#: Batch sizes tried: multiples of 8 on a roughly geometric grid.
BATCH_SIZES = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
#: Worker counts tried; storage-latency-bound pipelines need many more than the cores.
WORKER_COUNTS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
PREFETCH_FACTORS = (1, 2, 4, 8, 16)


def default_max_workers(cpu_count: int) -> int:
    """Default upper bound of ``num_workers``: well above the cores, for I/O-latency-bound data."""
    return min(64, max(16, 4 * cpu_count))


Applicability = Callable[[DeviceInfo, WorkloadInfo], str | None]


def _always(device: DeviceInfo, workload: WorkloadInfo) -> str | None:
    return None


def _cuda_only(device: DeviceInfo, workload: WorkloadInfo) -> str | None:
    return None if device.is_cuda else "only has an effect on a CUDA device"


def _four_d_inputs(device: DeviceInfo, workload: WorkloadInfo) -> str | None:
    if workload.input_batch_ndim != 4:
        ndim = workload.input_batch_ndim
        return f"only applies to 4-D (image) inputs; this workload's are {ndim}-D"
    return None


def _tf32_capable(device: DeviceInfo, workload: WorkloadInfo) -> str | None:
    if not device.is_cuda:
        return "only has an effect on a CUDA device"
    if device.compute_capability is None or device.compute_capability < (8, 0):
        return "needs a CUDA device of compute capability 8.0 (Ampere) or newer"
    return None


def _cpu_with_glibc(device: DeviceInfo, workload: WorkloadInfo) -> str | None:
    if device.is_cuda:
        return (
            "only searched on a CPU device, where the step's own tensors are host memory "
            "(on CUDA they live in PyTorch's caching allocator)"
        )
    if not device.glibc_malloc:
        return "needs glibc's malloc (Linux), which this device's processes were not seen using"
    return None


def _cpu_with_cores(device: DeviceInfo, workload: WorkloadInfo) -> str | None:
    if device.is_cuda:
        return (
            "only searched on a CPU device, where the step's operators run on the host's "
            "cores beside the loader workers"
        )
    if device.cpu_count < 2:
        return "needs a CPU with two cores or more (PyTorch already runs one thread on one)"
    return None


def _compile_runs(device: DeviceInfo, workload: WorkloadInfo) -> str | None:
    return device.compile_unavailable


def _optimizer_has_implementations(device: DeviceInfo, workload: WorkloadInfo) -> str | None:
    if workload.optimizer_impls:
        return None
    optimizer = workload.optimizer or "the workload's optimizer"
    return (
        f"needs an optimizer class that takes foreach=True or fused=True on this device; "
        f"{optimizer} took neither when the probe tried"
    )


def _dataloader_takes_in_order(device: DeviceInfo, workload: WorkloadInfo) -> str | None:
    if device.dataloader_in_order:
        return None
    return "needs torch 2.6 or later, whose DataLoader takes in_order"


@dataclass(frozen=True)
class Knob:
    """A setting autotune can search: its name (the JSON key), values and applicability."""

    name: str
    values: tuple[Any, ...]
    default: Any
    applies: Applicability
    #: Only meaningful when the DataLoader has workers.
    needs_workers: bool = False
    help: str = ""

    @property
    def is_flag(self) -> bool:
        """An on/off knob (``tf32`` also takes null: PyTorch's default)."""
        return all(value is None or isinstance(value, bool) for value in self.values)

    def reason_not_applicable(self, device: DeviceInfo, workload: WorkloadInfo) -> str | None:
        return self.applies(device, workload)


KNOBS: dict[str, Knob] = {
    knob.name: knob
    for knob in (
        Knob(
            "batch_size",
            BATCH_SIZES,
            32,
            _always,
            help="samples per step (searched: multiples of 8)",
        ),
        Knob("num_workers", WORKER_COUNTS, 0, _always, help="DataLoader worker processes"),
        Knob("pin_memory", (False, True), False, _cuda_only, help="page-locked host batches"),
        Knob(
            "prefetch_factor",
            PREFETCH_FACTORS,
            None,
            _always,
            needs_workers=True,
            help="batches loaded ahead by each worker",
        ),
        Knob(
            "persistent_workers",
            (False, True),
            False,
            _always,
            needs_workers=True,
            help="keep workers alive between epochs",
        ),
        Knob(
            "device_prefetch",
            (False, True),
            False,
            _cuda_only,
            help="copy the next batch on a side CUDA stream during this step",
        ),
        Knob("amp", ("off", "fp16", "bf16"), "off", _always, help="automatic mixed precision"),
        Knob("channels_last", (False, True), False, _four_d_inputs, help="NHWC memory format"),
        Knob("cudnn_benchmark", (False, True), False, _cuda_only, help="cuDNN autotuner"),
        # None leaves PyTorch's defaults (matmul fp32, cuDNN convolutions TF32); False (all
        # fp32) is never faster than that, so it is not searched, only accepted from the user.
        Knob(
            "tf32",
            (None, True),
            None,
            _tf32_capable,
            help="TF32 for every fp32 matmul and convolution (null: PyTorch's defaults)",
        ),
        Knob(
            "compile",
            ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
            "off",
            _compile_runs,
            help="torch.compile the model (inductor's mode)",
        ),
        Knob(
            "optimizer_impl",
            ("default", "foreach", "fused"),
            "default",
            _optimizer_has_implementations,
            help="the optimizer rebuilt with foreach=True or fused=True (default: as built)",
        ),
        Knob(
            "expandable_segments",
            (False, True),
            False,
            _cuda_only,
            help="CUDA's caching allocator maps expandable segments (less fragmentation)",
        ),
        Knob(
            "in_order",
            (True, False),
            True,
            _dataloader_takes_in_order,
            needs_workers=True,
            help="DataLoader hands out batches in order (false: whichever is ready first)",
        ),
        Knob(
            "retain_freed_memory",
            (False, True),
            False,
            _cpu_with_glibc,
            help="glibc's malloc keeps freed host memory for the next step instead of "
            "returning it to the kernel (no page faults per step, more resident memory)",
        ),
        # None is PyTorch's default (a thread per physical core); 1 leaves the other cores to
        # the loader workers. Other counts are accepted from the user (--range, --fix).
        Knob(
            "intra_op_threads",
            (None, 1),
            None,
            _cpu_with_cores,
            help="threads the step's operators use (torch.set_num_threads; null: PyTorch's "
            "default, one per core)",
        ),
    )
}

#: Why ``max-autotune`` is not searched off CUDA.
MAX_AUTOTUNE_OFF_CUDA = (
    "max-autotune tunes GPU kernels (Triton templates, CUDA graphs); on a CPU its C++ matmul "
    "templates need constant (frozen, inference) weights, so a training step is unchanged; "
    "use default"
)
#: The ``torch.compile`` modes that replay the step as CUDA graphs (static shapes only).
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
#: Why each compile mode but ``off`` and ``default`` cannot run off CUDA.
_COMPILE_OFF_CUDA = {
    "reduce-overhead": "reduce-overhead replays the step as CUDA graphs, which need a CUDA "
    "device; use default",
    "max-autotune": MAX_AUTOTUNE_OFF_CUDA,
    "max-autotune-no-cudagraphs": MAX_AUTOTUNE_OFF_CUDA.replace(
        "max-autotune tunes GPU kernels (Triton templates, CUDA graphs)",
        "max-autotune-no-cudagraphs tunes GPU kernels (Triton templates)",
    ),
}


def compile_modes(device: DeviceInfo) -> tuple[str, ...]:
    """``torch.compile`` modes searched on the device: all of inductor's on CUDA, else off and
    default."""
    if device.is_cuda:
        return ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
    return ("off", "default")


def value_unavailable(
    name: str, value: Any, device: DeviceInfo, workload: WorkloadInfo
) -> str | None:
    """Why knob ``name`` cannot take ``value`` on this device for this workload (a sentence
    naming the fix), or None when it can. Only values of knobs that apply are judged here;
    a knob that does not apply at all says so through :meth:`Knob.reason_not_applicable`."""
    if name == "compile" and value not in compile_modes(device):
        return _COMPILE_OFF_CUDA[value]
    if name == "amp" and value not in amp_modes(device):
        return f"amp={value} cannot run on {device.name}; use one of {', '.join(amp_modes(device))}"
    if name == "optimizer_impl" and value != "default" and value not in workload.optimizer_impls:
        optimizer = workload.optimizer or "the workload's optimizer"
        return (
            f"{optimizer} does not take {value}=True on this device; use "
            f"{', '.join(('default', *workload.optimizer_impls))}"
        )
    return None


def amp_modes(device: DeviceInfo) -> tuple[str, ...]:
    """AMP modes that can run on the device: fp16 needs CUDA, bf16 needs support for it."""
    modes = ["off"]
    if device.is_cuda:
        modes.append("fp16")
    if device.bf16_supported:
        modes.append("bf16")
    return tuple(modes)
