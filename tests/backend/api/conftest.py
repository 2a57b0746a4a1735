"""The API under test: one app per test over a fresh metadata database, SQLite and
PostgreSQL (each test runs on both)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..api_fixtures import Api, make_api, sqlite_url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "spindle.db")
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def api(db_url: str, tmp_path: Path) -> Iterator[Api]:
    with make_api(db_url, tmp_path / "data") as a:
        yield a
