"""Bring a metadata database to a schema revision, from code.

The API server and the worker migrate the database they are given before they use it, and the
tests migrate throwaway databases; all of them call these functions rather than the `alembic`
command so that it works from any working directory and leaves the caller's logging
configuration alone. The configuration is made here, not read from alembic.ini (which serves
the `alembic` command in a checkout): an installed Spindle has no alembic.ini, only this
package, whose `migrations/` holds the environment and the revisions (`migrations/versions/`).
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def _escape(value: str) -> str:
    # Alembic's options go through ConfigParser interpolation: a literal % must be doubled
    # (URL-encoded passwords have them).
    return value.replace("%", "%%")


def alembic_config(url: str) -> Config:
    """The Alembic configuration for the database at `url` (a SQLAlchemy URL)."""
    cfg = Config()
    cfg.set_main_option("script_location", _escape(str(MIGRATIONS)))
    cfg.set_main_option("sqlalchemy.url", _escape(url))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at `url` up to `revision` (default: the newest)."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at `url` down to `revision` ("base" removes every table)."""
    command.downgrade(alembic_config(url), revision)


def current(url: str) -> str | None:
    """The revision the database at `url` is at; None before the first upgrade."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head() -> str | None:
    """The newest revision in `migrations/versions/`."""
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return script.get_current_head()


__all__ = ["alembic_config", "current", "downgrade", "head", "upgrade"]
