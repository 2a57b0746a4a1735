"""The configuration and API pages list every setting and route."""

from __future__ import annotations

from pathlib import Path

from backend.api.app import create_app
from backend.db import Database
from backend.settings import Settings

DOCS = Path(__file__).resolve().parents[2] / "docs"


class _NoQueue:
    def launch(self, run_id: int) -> None: ...
    def execute(self, operation_id: str) -> None: ...
    def ready(self) -> str:
        return "ok"


def test_every_setting_is_documented() -> None:
    text = (DOCS / "configuration.md").read_text()
    missing = [n for n in Settings.model_fields if f"`SPINDLE_{n.upper()}`" not in text]
    assert missing == []


def test_every_route_is_documented(tmp_path: Path) -> None:
    text = (DOCS / "api.md").read_text()
    app = create_app(Settings(data_dir=tmp_path), Database("sqlite://"), _NoQueue())
    paths = set(app.openapi()["paths"])
    assert "/api/v1/pipelines" in paths
    missing = [p for p in sorted(paths) if p not in text]
    assert missing == []


def test_the_api_reference_is_rendered_from_the_committed_openapi_document() -> None:
    """docs/api-reference.md is what scripts/api_reference.py renders from
    frontend/openapi.json (itself checked against the app by `npm run check:api`)."""
    import json
    import runpy

    root = DOCS.parent
    render = runpy.run_path(str(root / "scripts" / "api_reference.py"))["render"]
    doc = json.loads((root / "frontend" / "openapi.json").read_text(encoding="utf-8"))
    assert render(doc) == (DOCS / "api-reference.md").read_text(encoding="utf-8"), (
        "docs/api-reference.md is stale: run `npm run gen:api` in frontend/"
    )
