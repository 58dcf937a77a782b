"""glibc's malloc, told to keep the memory a training step frees for the next step.

By default glibc serves every block above a threshold (at most 32 MiB, raised as large blocks
are freed) with its own ``mmap`` and returns it to the kernel when freed, and trims the top of
its heap once more than twice that threshold is free there. A CPU training step allocates and
frees activations and gradients of tens to hundreds of MiB each step, so the kernel zeroes and
faults those pages in again every step: thousands of minor page faults per step, for as long
as the run lasts (evidence: benchmarks/RESULTS.md).

Raising both thresholds (what ``python -m torch.backends.xeon.run_cpu`` gets from jemalloc or
tcmalloc, with glibc's own allocator) keeps freed memory in the process for reuse: no faults
per step, at the cost of a higher resident size, which the trial measures like any knob's.
It is set the same way in a trial, in the user's process (``rec.prepare_model``) and, for
scripts that do not use the apply API, by the environment variables of :data:`RETAIN_ENVIRONMENT`
before Python starts.
"""

from __future__ import annotations

import ctypes
import os
import sys

#: mallopt(3)'s parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Blocks below 1 GiB come from the heap, and the heap keeps up to 2 GiB free at its top.
MMAP_THRESHOLD_BYTES = 1 << 30
#: Older glibc (its sources of 2021 still) refuses an mmap threshold above half its heap size:
#: 32 MiB on 64 bits. Blocks above it are then still mapped afresh; the heap below it is kept.
OLD_GLIBC_MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = (1 << 31) - 1  # mallopt takes an int
#: The same settings for a process not yet started: glibc reads them when malloc starts up.
RETAIN_ENVIRONMENT = {
    "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD_BYTES),
    "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD_BYTES),
}


def glibc_malloc() -> bool:
    """Whether this process allocates with glibc's malloc, whose thresholds can be set."""
    if sys.platform != "linux":
        return False
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):  # musl and other C libraries do not know the name
        return False


def release_freed_memory() -> None:
    """Hand the memory malloc holds free back to the kernel now (``malloc_trim(0)``), so that
    the resident size is what is live: the profile does this before each point's peak, which
    otherwise, with freed memory retained, would carry every earlier point's buffers."""
    if glibc_malloc():
        ctypes.CDLL(None).malloc_trim(0)


def retain_freed_memory() -> None:
    """Keep freed host memory in this process (and the processes it forks from now on).

    Raises :class:`OSError` when glibc refuses a setting: a recommendation that was measured
    with it must not run silently without it.
    """
    if not glibc_malloc():
        raise OSError(
            "retain_freed_memory needs glibc's malloc (Linux), which this process "
            "does not use; set retain_freed_memory to false"
        )
    libc = ctypes.CDLL(None)
    mmap_set = any(
        libc.mallopt(_M_MMAP_THRESHOLD, value) == 1
        for value in (MMAP_THRESHOLD_BYTES, OLD_GLIBC_MMAP_THRESHOLD_BYTES)
    )
    if not mmap_set or libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) != 1:
        raise OSError(
            "glibc's mallopt refused the thresholds of retain_freed_memory; set it to false"
        )
