"""The FastAPI application: `create_app(settings, db, queue)`; components are injected so
tests can run it against any database and broker (the composition root, `backend.__main__`,
builds them from the environment)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from ..db import Database
from ..schemas.common import ErrorOut
from ..services.queue import TaskQueue
from ..services.tokens import TokenCache
from ..services.views import LiveViews
from ..settings import Settings
from . import errors, ui
from .context import Context
from .limits import BodyLimit
from .read_cache import InvalidateOnWrite, ReadCache
from .routers import checkpoints, data, health, observe, operations, pipelines, runs, tokens

API = "/api/v1"

# Every error body is ErrorOut; documented so generated clients and schema checks know it.
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": what}
    for status, what in (
        (401, "no valid token"),
        (403, "the token's role is not enough"),
        (404, "no such pipeline, checkpoint, operation, token, stream or view"),
        (409, "conflicts with the current state"),
        (413, "request body too large"),
        (422, "invalid spec, request or records; `errors` names the fields"),
        (503, "stored state cannot be read (a corrupt or missing file, named in `message`)"),
    )
}


def create_app(settings: Settings, db: Database, queue: TaskQueue) -> FastAPI:
    app = FastAPI(
        title="Spindle",
        version="1",
        description="Stateful streaming pipelines: register, run, checkpoint, restore.",
        openapi_url=f"{API}/openapi.json",
        docs_url=f"{API}/docs",
        redoc_url=None,
    )
    ctx = Context(
        settings,
        db,
        queue,
        TokenCache(settings.token_cache_s),
        ReadCache(settings.read_cache_s),
        LiveViews(settings.read_cache_s),
    )
    app.state.ctx = ctx
    errors.install(app)
    app.include_router(health.router)
    for r in (pipelines, checkpoints, operations, observe, data, tokens, runs):
        app.include_router(r.router, responses=ERRORS)
    ui.install(app)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["*"],
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
        )
    app.add_middleware(BodyLimit, default=settings.max_body_bytes, ingest=settings.max_ingest_bytes)
    app.add_middleware(InvalidateOnWrite, ctx=ctx)
    return app


__all__ = ["API", "create_app"]
