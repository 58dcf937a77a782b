"""/v1/devices: the device classes of the live workers, to submit a job for one of them."""

from __future__ import annotations

from fastapi import APIRouter

from autotune import service

from ..deps import SessionDep, SettingsDep
from ..schemas import DeviceClassPublic, DevicesPublic

router = APIRouter(prefix="/devices", tags=["devices"])


@router.get("", response_model=DevicesPublic)
def list_devices(session: SessionDep, settings: SettingsDep) -> DevicesPublic:
    """Device classes of the workers heard from within the heartbeat timeout, with how many
    workers serve each; pass one as ``device_class`` when submitting a job."""
    live = service.live_device_classes(session, settings.heartbeat_timeout_s)
    return DevicesPublic(
        data=[DeviceClassPublic(device_class=name, workers=count) for name, count in live.items()],
        count=len(live),
    )
