"""The encoded responses of the read routes that consoles, dashboards and `spindle wait`
poll (the pipeline list, one pipeline, its checkpoints), kept for up to `read_cache_s`
(SPINDLE_READ_CACHE_S) per API process, as Flink's REST API keeps its job and checkpoint
statistics. Many clients polling the same route then cost one database read per interval.

Invariants:
- A write request answered by this process (any method but GET, HEAD, OPTIONS) empties the
  cache before its response reaches the client, so a client sees its own writes at once.
- A read that started before such a write never stores its (possibly older) answer: entries
  carry the write generation they were read in.
- Changes made elsewhere (the worker's run states and steps, another API process) show
  after at most `ttl_s`.
- Only successful answers are stored; authorization runs before every lookup.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import TypeAdapter
from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..db import Database

T = TypeVar("T")
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


class ReadCache:
    def __init__(
        self, ttl_s: float, clock: Callable[[], float] = time.monotonic, max_entries: int = 1024
    ) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._max = max_entries
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self.generation = 0

    def get(self, key: str) -> bytes | None:
        hit = self._entries.get(key)
        if hit is None:
            return None
        expires, body = hit
        if self._clock() >= expires:
            del self._entries[key]
            return None
        return body

    def put(self, key: str, body: bytes, generation: int) -> None:
        """Store `body`, read while the cache was at `generation`, unless a write came since."""
        if self.ttl_s <= 0 or generation != self.generation:
            return
        self._entries[key] = (self._clock() + self.ttl_s, body)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def invalidate(self) -> None:
        self.generation += 1
        self._entries.clear()


class Reads(Protocol):
    """What the cached reads need of the API's context (`context.Context`)."""

    @property
    def reads(self) -> ReadCache: ...

    @property
    def db(self) -> Database: ...


async def cached_read(
    request: Request, ctx: Reads, adapter: TypeAdapter[T], read: Callable[[Session], T]
) -> Response:
    """The JSON of `read` (run in the thread pool, in its own transaction), from the cache
    when it is fresh. The route keeps its `response_model` for the OpenAPI document."""
    cache = ctx.reads
    key = f"{request.url.path}?{request.url.query}"
    body = cache.get(key)
    if body is None:
        generation = cache.generation
        body = await run_in_threadpool(_read, ctx, adapter, read)
        cache.put(key, body, generation)
    return Response(body, media_type="application/json")


def _read(ctx: Reads, adapter: TypeAdapter[Any], read: Callable[[Session], Any]) -> bytes:
    with ctx.db.session() as s:
        return adapter.dump_json(read(s))


# A running driver's reports (several a second per pipeline, `routers/runs.py`) are changes
# made outside any client's view, as when drivers wrote the database themselves: they show
# within the cache's lifetime instead of emptying it each time.
_DRIVERS = "/api/v1/runs/"


class InvalidateOnWrite:
    """ASGI middleware: a write request empties the read cache when its response starts (the
    request's transaction has committed by then), before the client can read again."""

    def __init__(self, app: ASGIApp, ctx: Reads) -> None:
        self.app = app
        self.ctx = ctx  # its cache is looked up per request: tests substitute it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] in _SAFE
            or scope["path"].startswith(_DRIVERS)
        ):
            await self.app(scope, receive, send)
            return

        async def send_after_invalidating(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.ctx.reads.invalidate()
            await send(message)

        try:
            await self.app(scope, receive, send_after_invalidating)
        finally:
            self.ctx.reads.invalidate()
