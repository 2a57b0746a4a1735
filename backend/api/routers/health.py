"""Liveness and readiness (no token needed), and the release's version."""

from __future__ import annotations

import os
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from storage_engine.objstore import open_object_store

from ...schemas.common import VersionOut
from ...version import installed_version
from ..deps import Ctx, Viewer

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """Liveness: the API process answers."""
    return {"status": "ok"}


@router.get("/api/v1/version")
def version(_: Viewer) -> VersionOut:
    """The installed release's version (as `spindle --version` prints it)."""
    return VersionOut(version=installed_version())


@router.get("/readyz", responses={503: {"description": "a dependency is not ready"}})
def readyz(ctx: Ctx) -> JSONResponse:
    """Database and broker reachable, data directory writable."""
    checks: dict[str, Any] = {}
    try:
        with ctx.db.session() as s:
            s.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as e:
        checks["database"] = f"error: {type(e).__name__}"
    checks["broker"] = ctx.queue.ready()
    url = ctx.settings.pipeline_store_url("_readyz")
    if url is not None:
        try:
            open_object_store(url).size("probe")  # reachable, and the bucket exists
            checks["object_store"] = "ok"
        except Exception as e:  # any failure to reach it means not ready
            checks["object_store"] = f"error: {type(e).__name__}"
    data = ctx.settings.data_path
    checks["storage"] = "ok" if data.is_dir() and _writable(data) else "error: not writable"
    ok = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ok" if ok else "unavailable", "checks": checks}, 200 if ok else 503
    )


def _writable(path: Any) -> bool:
    return os.access(path, os.W_OK)
