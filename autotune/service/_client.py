"""A small HTTP client of the REST API, used by ``autotune submit`` and ``autotune jobs``."""

from __future__ import annotations

from typing import Any

import httpx

from autotune.errors import ServiceError, validation_error_parts

DEFAULT_SERVER = "http://127.0.0.1:8000"


def _explain(response: httpx.Response) -> str:
    """The server's own sentence from a FastAPI error body (``detail``: text or a list)."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list) and detail:
        return "; ".join(_field_message(item) for item in detail if isinstance(item, dict))
    return f"the server answered HTTP {response.status_code}"


def _field_message(item: dict[str, Any]) -> str:
    """``n_trials: Input should be ...``; messages that already name their field stay as is."""
    where, message = validation_error_parts(item, skip=1)
    return message if not where or message.startswith(where) else f"{where}: {message}"


class ServiceClient:
    """Calls ``/v1`` on one server, with a bearer token when one is given.

    Example:
        >>> client = ServiceClient("http://127.0.0.1:8000", token=None)
        >>> client.base_url
        'http://127.0.0.1:8000'
    """

    def __init__(
        self,
        server: str = DEFAULT_SERVER,
        token: str | None = None,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = server.rstrip("/")
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout_s, transport=transport
        )

    def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, f"/v1{path}", **kwargs)
        except httpx.HTTPError as exc:
            raise ServiceError(
                f"cannot reach the autotune server at {self.base_url} ({exc}); start it with "
                "`autotune serve` or pass --server URL"
            ) from None
        if response.is_error:
            raise ServiceError(_explain(response))
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ServiceError(
                f"{self.base_url} did not answer with a JSON object; check that "
                "--server names an autotune server"
            )
        return data

    def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", "/jobs", json=body)

    def jobs(self, status: str | None = None, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        params: dict[str, Any] = {"offset": offset, "limit": limit}
        if status:
            params["status"] = status
        return self._request("GET", "/jobs", params=params)

    def job(self, job_id: int) -> dict[str, Any]:
        return self._request("GET", f"/jobs/{job_id}")

    def trials(self, job_id: int, offset: int = 0, limit: int = 100) -> dict[str, Any]:
        params = {"offset": offset, "limit": limit}
        return self._request("GET", f"/jobs/{job_id}/trials", params=params)

    def cancel(self, job_id: int) -> dict[str, Any]:
        return self._request("POST", f"/jobs/{job_id}/cancel")

    def recommendation(self, job_id: int) -> dict[str, Any]:
        return self._request("GET", f"/jobs/{job_id}/recommendation")

    def devices(self) -> dict[str, Any]:
        return self._request("GET", "/devices")

    def close(self) -> None:
        self._http.close()
