"""The built web console, served at /ui/ by the API in the embedded mode (one port).
Client-side routes fall back to index.html; `/` redirects to the console.

The build lives in this package (`console/`, written there by `npm run build` in frontend/,
see vite.config.ts), so the wheel ships it and an installed Spindle serves it. Without a
build, /ui/ says how to make one instead of failing."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

DIST = Path(__file__).resolve().parent / "console"
PREFIX = "/ui"

NOT_BUILT = "the web console is not built: `make ui` in a checkout builds it"
_NOT_BUILT_PAGE = """<!doctype html><title>Spindle</title>
<p>The web console is not built. Run <code>make ui</code> in a checkout of Spindle (npm ci
&& npm run build in frontend/), then reload, or install a wheel built after it. The REST
API is at <a href="/api/v1/docs">/api/v1/docs</a>.</p>"""


def is_built(dist: Path = DIST) -> bool:
    return (dist / "index.html").is_file()


def install(app: FastAPI, dist: Path = DIST) -> None:
    root = dist.resolve()

    @app.get("/", include_in_schema=False)
    def _home() -> RedirectResponse:
        return RedirectResponse(f"{PREFIX}/")

    @app.get(PREFIX, include_in_schema=False)
    @app.get(PREFIX + "/{path:path}", include_in_schema=False)
    def _console(path: str = "") -> Response:
        index = root / "index.html"
        if not index.is_file():
            return HTMLResponse(_NOT_BUILT_PAGE, status_code=503)
        wanted = (root / path).resolve()
        # A real file of the build (never outside it); anything else is a client-side route.
        if path and root in wanted.parents and wanted.is_file():
            return FileResponse(wanted)
        return FileResponse(index, headers={"Cache-Control": "no-cache"})


__all__ = ["DIST", "NOT_BUILT", "install", "is_built"]
