"""What the parent sends a trial process and what it hears back (JSON lines on a pipe)."""

from __future__ import annotations

import json
import os
from typing import Any

RESULT_FD_ENV = "AUTOTUNE_RESULT_FD"


class EventWriter:
    """Writes one JSON object per line to the result pipe the parent handed down."""

    def __init__(self) -> None:
        fd = os.environ.get(RESULT_FD_ENV)
        self._stream = os.fdopen(int(fd), "w", buffering=1) if fd else None

    def __call__(self, event: dict[str, Any]) -> None:
        if self._stream is None:
            print(json.dumps(event))
            return
        self._stream.write(json.dumps(event) + "\n")
        self._stream.flush()
