"""The driver's control plane over the REST API (`control_plane.ControlPlane`): the run's
endpoints (`/api/v1/runs/{run}/...`), authorised by the run's token, which the control
plane issued as the run started and revokes when it ends. A driver under `serve` (which
sets SPINDLE_API_URL) needs no access to the database.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from . import control_plane as cp
from .control_plane import Claimed, Desired, Finished, Opened, Report

API_URL_ENV = "SPINDLE_API_URL"
RUN_TOKEN_ENV = "SPINDLE_RUN_TOKEN"
TIMEOUT_S = 30.0
# Connection attempts per request: the API may be restarting (the control loop retries
# whatever still fails at its next poll).
CONNECT_RETRIES = 3


class RestControlPlane:
    """`ControlPlane` over HTTP, as run `run_id`; `client` has the API's base URL and the
    run's token."""

    def __init__(self, client: httpx.Client, run_id: int) -> None:
        self.client = client
        self.run_id = run_id
        self.pid = os.getpid()

    def opened(self, run: Opened) -> Desired:
        return cp.desired_from(self._post("opened", cp.opened_doc(run, self.pid)))

    def report(self, report: Report) -> Desired:
        try:
            return cp.desired_from(self._post("report", cp.report_doc(report, self.pid)))
        except httpx.HTTPStatusError as e:
            if e.response.status_code == 401:
                # The token is revoked: for the control plane this run has ended.
                return Desired(exit=True)
            raise

    def claim(self) -> list[Claimed]:
        return cp.claimed_from(self._post("claim", None))

    def finish(self, op_id: str, done: Finished) -> None:
        self._post(f"operations/{op_id}/finish", cp.finished_doc(done))

    def _post(self, path: str, doc: dict[str, Any] | None) -> Any:
        r = self.client.post(f"/api/v1/runs/{self.run_id}/{path}", json=doc)
        r.raise_for_status()
        return r.json() if r.status_code != 204 else None


def client(api_url: str, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=api_url,
        headers={"Authorization": f"Bearer {token}"},
        timeout=TIMEOUT_S,
        transport=httpx.HTTPTransport(retries=CONNECT_RETRIES),
    )


def from_env(run_id: int) -> RestControlPlane | None:
    """The REST control plane of run `run_id` when SPINDLE_API_URL and SPINDLE_RUN_TOKEN
    are set, else None."""
    url, token = os.environ.get(API_URL_ENV), os.environ.get(RUN_TOKEN_ENV)
    if not url or not token:
        return None
    return RestControlPlane(client(url, token), run_id)


__all__ = ["API_URL_ENV", "RUN_TOKEN_ENV", "RestControlPlane", "client", "from_env"]
