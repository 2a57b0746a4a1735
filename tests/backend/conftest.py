"""Fixtures for the control plane's tests: a fresh PostgreSQL database per test.

The server is the one `make services` starts; the admin URL comes from PG_ADMIN (or
SPINDLE_TEST_PG, as in tests/workers), default postgresql://postgres@127.0.0.1:5432/postgres.
An unreachable server makes the tests that need it fail, never skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

PG_ADMIN = os.environ.get(
    "PG_ADMIN",
    os.environ.get("SPINDLE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres"),
)


def _admin() -> psycopg.Connection[tuple[object, ...]]:
    try:
        return psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as e:
        pytest.fail(f"PostgreSQL is unreachable at {PG_ADMIN} (run `make services`): {e}")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A SQLAlchemy URL (psycopg 3) of a new, empty database, dropped after the test even if
    connections to it are still open."""
    name = f"spindle_test_{uuid.uuid4().hex[:12]}"
    with _admin() as c:
        # template0: nobody connects to it, so concurrent CREATEs never find it busy.
        c.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    try:
        url = make_url(PG_ADMIN).set(drivername="postgresql+psycopg", database=name)
        yield url.render_as_string(hide_password=False)
    finally:
        with _admin() as c:
            c.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
