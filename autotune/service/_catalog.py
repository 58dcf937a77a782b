"""The workloads a server may run: built-ins, installed entry points, files in one directory.

A request names a workload only by a name from this catalog, never by a path or module, so
HTTP cannot make the server import code the operator did not install or put there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from importlib.metadata import entry_points
from pathlib import Path
from typing import Literal

from autotune.errors import WorkloadError
from autotune.workload import builtin_names

ENTRY_POINT_GROUP = "autotune.workloads"


@dataclass(frozen=True)
class CatalogEntry:
    """A workload that can be submitted: its public name and the reference the tuner loads."""

    name: str
    source: Literal["builtin", "entry_point", "directory"]
    #: What :func:`autotune.workload.parse_ref` takes: ``builtin:NAME``, ``module:function``
    #: or an absolute ``.py`` path.
    ref: str


class WorkloadCatalog:
    """Lists and resolves workload names, reading the directory once per catalog (per request).

    Example:
        >>> WorkloadCatalog().resolve("builtin:image-cnn").ref
        'builtin:image-cnn'
    """

    def __init__(self, workloads_dir: Path | None = None) -> None:
        self.workloads_dir = workloads_dir

    def entries(self) -> dict[str, CatalogEntry]:
        """Every submittable workload by name: built-ins, then entry points, then files."""
        return dict(self._entries)

    @cached_property
    def _entries(self) -> dict[str, CatalogEntry]:
        found: dict[str, CatalogEntry] = {}
        for name in builtin_names():
            found[f"builtin:{name}"] = CatalogEntry(f"builtin:{name}", "builtin", f"builtin:{name}")
        for point in entry_points(group=ENTRY_POINT_GROUP):
            found.setdefault(point.name, CatalogEntry(point.name, "entry_point", point.value))
        if self.workloads_dir is not None and self.workloads_dir.is_dir():
            for path in sorted(self.workloads_dir.glob("*.py")):
                if path.stem.isidentifier() and not path.stem.startswith("_"):
                    entry = CatalogEntry(path.stem, "directory", str(path.resolve()))
                    found.setdefault(path.stem, entry)
        return found

    def resolve(self, name: str) -> CatalogEntry:
        """The entry called exactly ``name``; anything else (a path, a module) is refused."""
        entries = self.entries()
        if name in entries:
            return entries[name]
        raise WorkloadError(
            f"unknown workload {name[:100]!r}; submit one of {', '.join(entries)} "
            "(GET /v1/workloads lists them; files and modules cannot be named directly)"
        )

    def entry_of_ref(self, ref: str) -> CatalogEntry | None:
        """The entry whose stored reference is exactly ``ref``, or None: how a worker checks
        that a job's workload, as the database holds it, is one this catalog offers."""
        return next((entry for entry in self._entries.values() if entry.ref == ref), None)

    def name_of(self, ref: str) -> str:
        """The public name of a stored reference (the reference itself if no longer listed)."""
        return self._names_by_ref.get(ref, ref)

    @cached_property
    def _names_by_ref(self) -> dict[str, str]:
        return {entry.ref: entry.name for entry in reversed(self._entries.values())}
