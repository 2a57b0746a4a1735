"""Request body limits, enforced before a body is read whole: by Content-Length when sent,
and by counting the streamed bytes otherwise (chunked uploads cannot slip past)."""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class _TooLarge(HTTPException):
    """Raised while the app reads the body; FastAPI passes HTTPExceptions through to the
    error handlers, which answer 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than {limit} bytes")


_INGEST = re.compile(r"^/api/v1/pipelines/[^/]+/ingest/[^/]+$")


class BodyLimit:
    def __init__(self, app: ASGIApp, default: int, ingest: int) -> None:
        self.app = app
        self.default = default
        self.ingest = ingest

    def _limit(self, scope: Scope) -> int:
        return self.ingest if _INGEST.match(scope.get("path", "")) else self.default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope)
        for k, v in scope.get("headers", []):
            if k == b"content-length":
                try:
                    if int(v) > limit:
                        await _reject(send, limit)
                        return
                except ValueError:
                    pass
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > limit:
                    raise _TooLarge(limit)
            return msg

        await self.app(scope, counted, send)


async def _reject(send: Send, limit: int) -> None:
    body: dict[str, Any] = {
        "code": "payload_too_large",
        "message": f"request body larger than {limit} bytes",
        "errors": [],
        "details": {"limit_bytes": limit},
    }
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
