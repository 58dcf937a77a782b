"""One training configuration: the values of every knob, as the recommendation JSON names them."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

AmpMode = Literal["off", "fp16", "bf16"]
CompileMode = Literal[
    "off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"
]
#: How the optimizer steps: PyTorch's choice for the device (or the user's own flag), or the
#: class's ``foreach`` (one kernel per operation over all tensors) or ``fused`` implementation.
OptimizerImpl = Literal["default", "foreach", "fused"]

#: More DataLoader processes than this is a mistake, never a speed-up.
MAX_WORKERS = 256
#: The largest batch a configuration may hold: far beyond any device's memory for a real
#: model, and small enough that the samples of a run stay exact integers everywhere.
MAX_BATCH_SIZE = 2**20
#: More operator threads than this is a typo: no host has that many cores.
MAX_INTRA_OP_THREADS = 4096
#: What ``DataLoader`` uses when ``prefetch_factor`` is left unset and there are workers.
TORCH_DEFAULT_PREFETCH_FACTOR = 2


class Config(BaseModel):
    """The knob values of one trial; field names are the recommendation JSON's keys.

    Example:
        >>> Config(batch_size=64, num_workers=4).key() == Config(batch_size=64, num_workers=4,
        ...     prefetch_factor=None).key()
        True
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_size: int = 32
    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    device_prefetch: bool = False
    amp: AmpMode = "off"
    channels_last: bool = False
    cudnn_benchmark: bool = False
    #: TF32 for float32 matmuls and convolutions; None leaves PyTorch's defaults alone (matmul
    #: in full fp32, cuDNN convolutions in TF32), which is what a user who never set it runs.
    tf32: bool | None = None
    #: ``torch.compile`` the model: off, or with one of inductor's modes (``reduce-overhead``
    #: and ``max-autotune`` replay the step as CUDA graphs; CUDA only but ``default``).
    compile: CompileMode = "off"
    #: The optimizer's implementation: the workload's optimizer rebuilt with ``foreach=True``
    #: or ``fused=True``, its parameter groups and hyper-parameters unchanged.
    optimizer_impl: OptimizerImpl = "default"
    #: CUDA's caching allocator maps memory in expandable segments
    #: (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, set before CUDA starts): less
    #: fragmentation, so a larger batch may fit.
    expandable_segments: bool = False
    #: The DataLoader hands batches out in order (``in_order=True``, PyTorch's default); False
    #: hands out whichever worker's batch is ready first, which changes the order of samples
    #: within a window of ``num_workers * prefetch_factor`` batches. Only with workers.
    in_order: bool = True
    #: glibc's malloc keeps freed host memory for the next step instead of handing it back to
    #: the kernel (CPU devices on Linux; see ``autotune.measure._host_allocator``).
    retain_freed_memory: bool = False
    #: Threads the training process's operators run on (``torch.set_num_threads``); None
    #: leaves PyTorch's default, one per physical core. CPU devices only: with busy loader
    #: workers, a step on every core and the workers wait on each other.
    intra_op_threads: int | None = None
    #: Micro-batches per optimizer step; set from ``--effective-batch``, never searched.
    grad_accum_steps: int = 1

    @field_validator("batch_size")
    @classmethod
    def _batch_positive(cls, value: int) -> int:
        # Any positive batch is a batch someone trains with (large models use 1-4); only the
        # searched grid is restricted to multiples of 8.
        if value < 1:
            raise ValueError(f"batch_size {value} is not positive; use 1 or more")
        if value > MAX_BATCH_SIZE:
            raise ValueError(
                f"batch_size {value} is more than {MAX_BATCH_SIZE} (2**20); use a smaller batch"
            )
        return value

    @field_validator("num_workers")
    @classmethod
    def _workers_non_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"num_workers {value} is negative; use 0 to load in the main process")
        if value > MAX_WORKERS:
            raise ValueError(f"num_workers {value} is more than {MAX_WORKERS}; use fewer workers")
        return value

    @field_validator("prefetch_factor")
    @classmethod
    def _prefetch_in_range(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= 16:
            raise ValueError(f"prefetch_factor {value} is outside 1..16; use null for the default")
        return value

    @field_validator("intra_op_threads")
    @classmethod
    def _threads_positive(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(
                f"intra_op_threads {value} is not positive; use 1 or more, or "
                "null for PyTorch's default"
            )
        if value is not None and value > MAX_INTRA_OP_THREADS:
            raise ValueError(
                f"intra_op_threads {value} is more than {MAX_INTRA_OP_THREADS}; use at most "
                "the host's cores, or null for PyTorch's default"
            )
        return value

    @field_validator("grad_accum_steps")
    @classmethod
    def _accum_positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"grad_accum_steps {value} must be at least 1")
        return value

    @property
    def effective_batch(self) -> int:
        """Samples per optimizer step: the micro-batch times the gradient-accumulation steps."""
        return self.batch_size * self.grad_accum_steps

    def normalized(self) -> Config:
        """The same configuration with settings that cannot take effect reset.

        ``prefetch_factor``, ``persistent_workers`` and ``in_order`` mean nothing without
        workers, and an unset ``prefetch_factor`` with workers is PyTorch's default of 2:
        configurations that differ only there are one configuration.
        """
        if self.num_workers == 0 and (
            self.prefetch_factor is not None or self.persistent_workers or not self.in_order
        ):
            return self.model_copy(
                update={"prefetch_factor": None, "persistent_workers": False, "in_order": True}
            )
        if self.num_workers > 0 and self.prefetch_factor is None:
            return self.model_copy(update={"prefetch_factor": TORCH_DEFAULT_PREFETCH_FACTOR})
        return self

    def key(self) -> str:
        """A canonical string that is equal for configurations that behave the same."""
        return json.dumps(self.normalized().model_dump(), sort_keys=True, separators=(",", ":"))

    def public_dict(self) -> dict[str, Any]:
        """The knob values as written to the recommendation JSON."""
        return self.normalized().model_dump()
