"""Built-in workloads: small, self-contained benchmarks that need no data download.

``BUILTINS`` maps each name (as given to the CLI) to a zero-argument factory returning a
:class:`~autotune.workload._contract.Workload`.
"""

from __future__ import annotations

from collections.abc import Callable

from autotune.workload._contract import Workload
from autotune.workload.builtins._image import image_cnn
from autotune.workload.builtins._slow_storage import slow_storage
from autotune.workload.builtins._text import text_transformer

__all__ = ["BUILTINS"]

BUILTINS: dict[str, Callable[[], Workload]] = {
    "image-cnn": image_cnn,
    "text-transformer": text_transformer,
    "slow-storage": slow_storage,
}
