"""The FastAPI application: `create_app(settings, db, queue)`; components are injected so
tests can run it against any database and broker."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from ..db import Database
from ..services.queue import TaskQueue
from ..settings import Settings
from . import errors, ui
from .context import Context
from .limits import BodyLimit
from .routers import checkpoints, data, health, observe, operations, pipelines, tokens

API = "/api/v1"


def create_app(settings: Settings, db: Database, queue: TaskQueue) -> FastAPI:
    app = FastAPI(
        title="Spindle",
        version="1",
        description="Stateful streaming pipelines: register, run, checkpoint, restore.",
        openapi_url=f"{API}/openapi.json",
        docs_url=f"{API}/docs",
        redoc_url=None,
    )
    app.state.ctx = Context(settings, db, queue)
    errors.install(app)
    for r in (health, pipelines, checkpoints, operations, observe, data, tokens):
        app.include_router(r.router)
    ui.install(app)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["*"],
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
        )
    app.add_middleware(BodyLimit, default=settings.max_body_bytes, ingest=settings.max_ingest_bytes)
    return app


__all__ = ["API", "create_app"]
