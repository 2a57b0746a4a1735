"""The REST API over httpx: one method per route (DESIGN.md §6, docs/api.md).

Every failure surfaces as one exception, `ServerError`: an error response (its JSON
`{code, message, errors, details}` kept verbatim), a non-JSON error, or a transport failure
(`code` "unreachable" or "timeout", no `status`). Nothing else escapes from httpx.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from . import sse

Json = dict[str, Any]

DONE = ("succeeded", "failed")  # terminal operation statuses


class ServerError(Exception):
    """A failed request: `status` None means the server was never reached."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str = "unreachable",
        errors: list[tuple[str, str]] | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.errors = errors or []
        self.details = details or {}


def _seg(value: str) -> str:
    """One path segment, escaped (names and uuids never add path levels)."""
    return quote(value, safe="")


def _error_from(r: httpx.Response) -> ServerError:
    try:
        body = r.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        errs = [
            (str(e.get("field", "")), str(e.get("message", "")))
            for e in body.get("errors") or []
            if isinstance(e, dict)
        ]
        details = body.get("details")
        return ServerError(
            body["message"],
            status=r.status_code,
            code=str(body.get("code") or "http_error"),
            errors=errs,
            details=details if isinstance(details, dict) else {},
        )
    text = r.text.strip()[:300] or r.reason_phrase
    return ServerError(f"HTTP {r.status_code}: {text}", status=r.status_code, code="http_error")


class Api:
    """A connection to one Spindle server. Use as a context manager, or call `close()`."""

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            self._http = httpx.Client(
                base_url=self.url, headers=headers, timeout=timeout_s, transport=transport
            )
        except (httpx.InvalidURL, ValueError) as e:
            raise ServerError(f"invalid server URL {self.url!r}: {e}", code="invalid_url") from None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- transport --

    def _failure(self, e: Exception) -> ServerError:
        if isinstance(e, httpx.TimeoutException):
            return ServerError(
                f"timed out talking to {self.url}: {e or type(e).__name__}", code="timeout"
            )
        if isinstance(e, httpx.InvalidURL | httpx.UnsupportedProtocol):
            return ServerError(f"invalid server URL {self.url!r}: {e}", code="invalid_url")
        return ServerError(f"cannot reach {self.url}: {e or type(e).__name__}")

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """A request whose response is a success (2xx); anything else raises ServerError."""
        try:
            r = self._http.request(method, path, **kw)
        except (httpx.HTTPError, httpx.InvalidURL) as e:
            raise self._failure(e) from None
        if r.status_code >= 400:
            raise _error_from(r)
        return r

    def _json(self, method: str, path: str, **kw: Any) -> Any:
        r = self.request(method, path, **kw)
        if not r.content:
            return None
        try:
            return r.json()
        except ValueError:
            raise ServerError(
                f"{method} {path}: the server did not answer JSON",
                status=r.status_code,
                code="bad_response",
            ) from None

    # -- pipelines --

    def validate_spec(self, spec: Json) -> Json:
        return dict(self._json("POST", "/api/v1/pipelines/validate", json={"spec": spec}))

    def create_pipeline(self, spec: Json, description: str = "") -> Json:
        body = {"spec": spec, "description": description}
        return dict(self._json("POST", "/api/v1/pipelines", json=body))

    def list_pipelines(self) -> list[Json]:
        return list(self._json("GET", "/api/v1/pipelines"))

    def get_pipeline(self, name: str) -> Json:
        return dict(self._json("GET", f"/api/v1/pipelines/{_seg(name)}"))

    def replace_pipeline(self, name: str, spec: Json, description: str) -> Json:
        body = {"spec": spec, "description": description}
        return dict(self._json("PUT", f"/api/v1/pipelines/{_seg(name)}", json=body))

    def fork_pipeline(
        self,
        name: str,
        new: str,
        checkpoint: str,
        spec: Json | None = None,
        start: bool = False,
        description: str = "",
    ) -> Json:
        body = {"name": new, "checkpoint": checkpoint, "spec": spec, "start": start}
        body["description"] = description
        return dict(self._json("POST", f"/api/v1/pipelines/{_seg(name)}/fork", json=body))

    def delete_pipeline(self, name: str) -> None:
        self.request("DELETE", f"/api/v1/pipelines/{_seg(name)}")

    def start(
        self, name: str, from_checkpoint: str = "latest", drop_state: Sequence[str] = ()
    ) -> Json:
        params: dict[str, str | list[str]] = {"from_checkpoint": from_checkpoint}
        if drop_state:
            params["drop_state"] = list(drop_state)
        return dict(self._json("POST", f"/api/v1/pipelines/{_seg(name)}/start", params=params))

    def stop(self, name: str, checkpoint: bool = False) -> Json:
        params = {"checkpoint": "true" if checkpoint else "false"}
        return dict(self._json("POST", f"/api/v1/pipelines/{_seg(name)}/stop", params=params))

    def pause(self, name: str) -> Json:
        return dict(self._json("POST", f"/api/v1/pipelines/{_seg(name)}/pause"))

    def resume(self, name: str) -> Json:
        return dict(self._json("POST", f"/api/v1/pipelines/{_seg(name)}/resume"))

    def runs(self, name: str, limit: int = 100) -> list[Json]:
        params = {"limit": limit}
        return list(self._json("GET", f"/api/v1/pipelines/{_seg(name)}/runs", params=params))

    def logs(self, name: str, lines: int = 200, run: int | None = None) -> Json:
        params: dict[str, Any] = {"lines": lines}
        if run is not None:
            params["run"] = run
        return dict(self._json("GET", f"/api/v1/pipelines/{_seg(name)}/logs", params=params))

    # -- checkpoints and retention --

    def checkpoints(self, name: str) -> list[Json]:
        return list(self._json("GET", f"/api/v1/pipelines/{_seg(name)}/checkpoints"))

    def commit(self, name: str, identifier: str | None = None) -> Json:
        body = {"identifier": identifier} if identifier is not None else None
        return dict(self._json("POST", f"/api/v1/pipelines/{_seg(name)}/checkpoints", json=body))

    def gc(self, name: str, keep: int | None = None) -> Json:
        body = {"keep": keep} if keep is not None else None
        path = f"/api/v1/pipelines/{_seg(name)}/checkpoints/gc"
        return dict(self._json("POST", path, json=body))

    def delete_checkpoint(self, name: str, uuid: str) -> Json:
        path = f"/api/v1/pipelines/{_seg(name)}/checkpoints/{_seg(uuid)}"
        return dict(self._json("DELETE", path))

    def pin(self, name: str, uuid: str, pinned: bool) -> Json:
        path = f"/api/v1/pipelines/{_seg(name)}/checkpoints/{_seg(uuid)}"
        return dict(self._json("PATCH", path, json={"pinned": pinned}))

    def restore(self, name: str, uuid: str) -> Json:
        path = f"/api/v1/pipelines/{_seg(name)}/checkpoints/{_seg(uuid)}/restore"
        return dict(self._json("POST", path))

    def get_retention(self, name: str) -> Json:
        return dict(self._json("GET", f"/api/v1/pipelines/{_seg(name)}/retention"))

    def put_retention(self, name: str, policy: Json) -> Json:
        path = f"/api/v1/pipelines/{_seg(name)}/retention"
        return dict(self._json("PUT", path, json=policy))

    # -- operations --

    def operation(self, op_id: str) -> Json:
        return dict(self._json("GET", f"/api/v1/operations/{_seg(op_id)}"))

    def wait_operation(
        self,
        op: Json,
        timeout_s: float,
        every_s: float = 0.25,
        on_poll: Callable[[Json], None] | None = None,
    ) -> Json:
        """Poll until the operation succeeds or fails; after `timeout_s`, its latest state."""
        deadline = time.monotonic() + timeout_s
        while op.get("status") not in DONE and time.monotonic() < deadline:
            time.sleep(every_s)
            op = self.operation(str(op["id"]))
            if on_poll is not None:
                on_poll(op)
        return op

    # -- metrics, data --

    def metrics(self, name: str, limit: int = 1000, since: float | None = None) -> list[Json]:
        params: dict[str, Any] = {"limit": limit}
        if since is not None:
            params["since"] = since
        return list(self._json("GET", f"/api/v1/pipelines/{_seg(name)}/metrics", params=params))

    def dataflow(self, name: str) -> Json:
        return dict(self._json("GET", f"/api/v1/pipelines/{_seg(name)}/dataflow"))

    def metric_events(
        self, name: str, backlog: int = 0, after: int | None = None
    ) -> Iterator[Json]:
        """The live metric samples of the SSE stream, one per step, until closed: the
        `backlog` most recent first, or every one with an id above `after`."""
        path = f"/api/v1/pipelines/{_seg(name)}/metrics/stream"
        timeout = httpx.Timeout(30.0, read=90.0)  # the server pings every 15 s
        headers = {"Last-Event-ID": str(after)} if after is not None else {}
        try:
            with self._http.stream(
                "GET", path, params={"backlog": backlog}, headers=headers, timeout=timeout
            ) as r:
                if r.status_code >= 400:
                    r.read()
                    raise _error_from(r)
                for ev in sse.parse(r.iter_lines()):
                    if ev.event != "step":
                        continue
                    try:
                        sample = json.loads(ev.data)
                    except ValueError:
                        continue
                    if isinstance(sample, dict):
                        yield sample
        except (httpx.HTTPError, httpx.InvalidURL) as e:
            raise self._failure(e) from None

    def ingest(self, name: str, stream: str, body: bytes, fmt: str) -> Json:
        ctype = "text/csv" if fmt == "csv" else "application/x-ndjson"
        path = f"/api/v1/pipelines/{_seg(name)}/ingest/{_seg(stream)}"
        return dict(
            self._json(
                "POST",
                path,
                content=body,
                params={"format": fmt},
                headers={"content-type": ctype},
                timeout=120.0,
            )
        )

    def view(
        self,
        name: str,
        view: str,
        keys: list[str],
        offset: int = 0,
        limit: int = 100,
        as_of: str | None = None,
        ge: str | None = None,
        lt: str | None = None,
    ) -> Json:
        params: list[tuple[str, str | int]] = [("offset", offset), ("limit", limit)]
        params += [("key", k) for k in keys]
        params += [(n, v) for n, v in (("as_of", as_of), ("ge", ge), ("lt", lt)) if v is not None]
        path = f"/api/v1/pipelines/{_seg(name)}/views/{_seg(view)}"
        return dict(self._json("GET", path, params=params))

    def view_diff(
        self, name: str, view: str, old: str, new: str, offset: int = 0, limit: int = 1000
    ) -> Json:
        params: list[tuple[str, str | int]] = [("from", old), ("to", new)]
        params += [("offset", offset), ("limit", limit)]
        path = f"/api/v1/pipelines/{_seg(name)}/views/{_seg(view)}/diff"
        return dict(self._json("GET", path, params=params))

    # -- tokens --

    def create_token(self, name: str, role: str) -> Json:
        return dict(self._json("POST", "/api/v1/tokens", json={"name": name, "role": role}))

    def list_tokens(self) -> list[Json]:
        return list(self._json("GET", "/api/v1/tokens"))

    def revoke_token(self, token_id: int) -> None:
        self.request("DELETE", f"/api/v1/tokens/{token_id}")
