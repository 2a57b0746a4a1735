"""The REST API: health and readiness. Over a real metadata database, each test on SQLite and on
PostgreSQL; no Spark and no Celery (the TaskQueue is a recording double), storage locations
built with the engine itself (conftest.py)."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest

from ..api_fixtures import (
    Api,
    RecordingQueue,
    make_api,
)

pytestmark = pytest.mark.timeout(120)


def test_health(api: Api) -> None:
    r = api.get("/healthz", token=None)
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    r = api.get("/readyz", token=None)
    assert r.status_code == 200
    assert r.json() == {
        "status": "ok",
        "checks": {"database": "ok", "broker": "ok", "object_store": "ok", "storage": "ok"},
    }


def test_the_version_is_the_installed_release(api: Api) -> None:
    assert api.get("/api/v1/version").json() == {"version": importlib.metadata.version("spindle")}
    assert api.get("/api/v1/version", token=None).status_code == 401


def test_readyz_reports_a_broker_that_is_down(db_url: str, tmp_path: Path) -> None:
    with make_api(db_url, tmp_path / "data", RecordingQueue("error: down")) as api:
        r = api.get("/readyz", token=None)
        assert r.status_code == 503
        assert r.json() == {
            "status": "unavailable",
            "checks": {
                "database": "ok",
                "broker": "error: down",
                "object_store": "ok",
                "storage": "ok",
            },
        }
        assert api.get("/healthz", token=None).status_code == 200
        api.queue.status = "ok"
        assert api.get("/readyz", token=None).status_code == 200


def test_readyz_reports_a_missing_data_dir(db_url: str, tmp_path: Path) -> None:
    with make_api(db_url, tmp_path / "data") as api:
        os.rmdir(api.settings.data_path)
        r = api.get("/readyz", token=None)
        assert r.status_code == 503
        assert r.json()["checks"]["storage"] == "error: not writable"
        assert r.json()["checks"]["database"] == "ok"
