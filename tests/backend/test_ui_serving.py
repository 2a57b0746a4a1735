"""The API serves the built console at /ui/ (files of the build; anything else is a
client-side route answered with index.html), never a file outside the build."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from backend.api import ui


def _app(dist: Path) -> TestClient:
    app = FastAPI()
    ui.install(app, dist)
    return TestClient(app)


def test_console_files_and_client_routes(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text("<html>console</html>")
    (dist / "assets" / "app.js").write_text("console.log(1)")
    (tmp_path / "secret.txt").write_text("nope")
    assert ui.is_built(dist)
    c = _app(dist)
    r = c.get("/", follow_redirects=False)
    assert r.status_code in (302, 307) and r.headers["location"] == "/ui/"
    assert c.get("/ui/").text == "<html>console</html>"
    assert c.get("/ui/assets/app.js").text == "console.log(1)"
    assert c.get("/ui/pipelines/clicks/checkpoints").text == "<html>console</html>"
    assert "nope" not in c.get("/ui/../secret.txt").text
    assert "nope" not in c.get("/ui/%2e%2e/secret.txt").text


def test_console_not_built(tmp_path: Path) -> None:
    assert not ui.is_built(tmp_path / "missing")
    r = _app(tmp_path / "missing").get("/ui/")
    assert r.status_code == 503 and "not built" in r.text and "make ui" in r.text
