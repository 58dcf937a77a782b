"""/v1/workloads: the names a job may be submitted with."""

from __future__ import annotations

from fastapi import APIRouter

from ..deps import CatalogDep
from ..schemas import WorkloadPublic, WorkloadsPublic

router = APIRouter(prefix="/workloads", tags=["workloads"])


@router.get("", response_model=WorkloadsPublic)
def list_workloads(catalog: CatalogDep) -> WorkloadsPublic:
    """Built-ins, installed ``autotune.workloads`` entry points and the workloads directory."""
    entries = catalog.entries().values()
    data = [WorkloadPublic(name=entry.name, source=entry.source) for entry in entries]
    return WorkloadsPublic(data=data, count=len(data))
