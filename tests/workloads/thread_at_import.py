"""A healthy workload whose module starts a thread when imported (a forked process lacks it)."""

from __future__ import annotations

import threading

from tiny import workload  # its neighbour: the workload file's folder is on sys.path

__all__ = ["workload"]

_WAKE = threading.Event()
threading.Thread(target=_WAKE.wait, name="started-at-import", daemon=True).start()
