"""The dashboard: the jobs list at ``/``, a job's page, two jobs compared, and their assets.

The pages are shells without data: their script reads everything through ``/v1`` with the
bearer token the user typed, so they follow the API's auth rules exactly. They are left out of
the OpenAPI schema, which describes the JSON API.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, status
from fastapi.responses import HTMLResponse, Response

from autotune.report import asset, service_page

router = APIRouter(tags=["dashboard"], include_in_schema=False)

#: Asset names carry their content's hash or version, so a browser may keep them for good.
_IMMUTABLE = "public, max-age=31536000, immutable"


@router.get("/", response_class=HTMLResponse)
def jobs_page() -> HTMLResponse:
    return HTMLResponse(service_page("jobs"))


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(job_id: Annotated[int, Path(ge=1, le=2**31 - 1)]) -> HTMLResponse:
    return HTMLResponse(service_page("job", job_id))


@router.get("/compare", response_class=HTMLResponse)
def compare_page() -> HTMLResponse:
    return HTMLResponse(service_page("compare"))


@router.get("/assets/{name}")
def page_asset(name: str) -> Response:
    found = asset(name)
    if found is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"there is no asset {name}; reload the page to get current links",
        )
    return Response(found.body, media_type=found.media_type, headers={"Cache-Control": _IMMUTABLE})
