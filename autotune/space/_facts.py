"""What a probe learns about the device and the workload, which decides what can be searched."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

NOT_CHECKED_FOR_COMPILE = "was not checked on this device (only a probe checks it)"


class DeviceInfo(BaseModel):
    """The device trials run on, as seen from a trial process."""

    model_config = ConfigDict(frozen=True)

    type: str  # "cpu" or "cuda"
    name: str
    memory_bytes: int
    index: int | None = None
    #: The GPU's UUID as NVML spells it ("GPU-..."): ordinals differ between processes that
    #: see different CUDA_VISIBLE_DEVICES, the UUID does not.
    uuid: str | None = None
    bf16_supported: bool = False
    #: bf16 runs in hardware (tensor cores; on a CPU the avx512_bf16 or amx_bf16 instructions),
    #: so the checklist turns it on; elsewhere bf16 is emulated and only searched.
    bf16_native: bool = False
    #: (major, minor) CUDA compute capability; None on CPU.
    compute_capability: tuple[int, int] | None = None
    #: The cores one rank of the user's launch gets: the host's divided among the ranks sharing
    #: it (see :attr:`host_share`).
    cpu_count: int = 1
    #: Ranks sharing this host in the user's launch (``--nproc-per-node``/``--host-share``).
    host_share: int = 1
    #: Why ``torch.compile`` cannot run here (no C++ compiler, no Triton on CUDA, a Python
    #: torch refuses); None when it can. Found by the probe: a device described otherwise (by
    #: hand, or stored before compile was a knob) is not known to compile.
    compile_unavailable: str | None = NOT_CHECKED_FOR_COMPILE
    #: The trial processes allocate host memory with glibc's malloc, whose thresholds can be
    #: set; False for a device described before this was probed.
    glibc_malloc: bool = False
    #: The installed torch's ``DataLoader`` takes ``in_order`` (2.6 and later); False for a
    #: device described before this was probed.
    dataloader_in_order: bool = False

    @property
    def is_cuda(self) -> bool:
        return self.type == "cuda"

    @property
    def nvml_id(self) -> str | int | None:
        """How NVML finds this GPU: its UUID, else its ordinal; None off CUDA."""
        if not self.is_cuda:
            return None
        return self.uuid if self.uuid is not None else self.index

    @property
    def torch_device(self) -> str:
        return f"cuda:{self.index}" if self.is_cuda and self.index is not None else self.type

    def public_dict(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "memory_bytes": self.memory_bytes}


class WorkloadInfo(BaseModel):
    """Facts about a user's workload, read once in a probe process."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    #: Number of samples for a map-style dataset; None for an iterable one.
    dataset_length: int | None
    #: Dimensions of one input batch's (first) tensor: 4 for images, so channels_last applies.
    input_batch_ndim: int
    #: The batch size the user trains with today (the baseline's).
    batch_size: int
    #: Host memory of a process that has built the model and read one batch (bytes).
    idle_host_memory_bytes: int = 0
    #: The class name of the workload's optimizer (e.g. ``AdamW``): it picks the learning-rate
    #: advice when a recommendation changes the effective batch; empty when it is unknown.
    optimizer: str = ""
    #: The implementations besides ``default`` that the workload's optimizer class takes and
    #: steps with on the device (``foreach``, ``fused``), as the probe found by trying them.
    optimizer_impls: tuple[str, ...] = ()
    #: Knob values of the user's run beside the batch size (``Workload.baseline``: a
    #: framework's arguments as the script set them), which the baseline starts from.
    baseline: dict[str, Any] = {}
