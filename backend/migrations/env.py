"""Alembic's environment for the metadata database (SQLite or PostgreSQL).

Where the database is, first match wins:
1. `config.attributes["connection"]`: a SQLAlchemy Connection handed in by code that already
   holds one (used as is and left open; its caller owns the transaction and the pragmas);
2. the `sqlalchemy.url` main option (`backend.migrate` sets it);
3. `backend.settings.Settings().db_url` (SPINDLE_DATABASE_URL, default SQLite in the data dir).

SQLite cannot ALTER most things, so its migrations run in batch mode (copy and move), which is
why every constraint has a name (the naming convention on `backend.db.Base.metadata`).
"""

from __future__ import annotations

from logging.config import fileConfig
from pathlib import Path
from typing import Any

from alembic import context
from sqlalchemy import Connection, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

import backend.models  # noqa: F401  (registers every table on Base.metadata)
from backend.db import Base
from backend.settings import Settings

config = context.config
target_metadata = Base.metadata

# The `alembic` command configures logging from alembic.ini. Code calling Alembic
# (backend.migrate) passes no file and keeps its own logging.
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or Settings().db_url


def _is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def run_migrations_offline() -> None:
    """Write the SQL (to stdout, or the config's output buffer) instead of running it."""
    url = _url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=_is_sqlite(url),
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run(connection: Connection, **opts: Any) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        **opts,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return

    url = _url()
    engine = create_engine(url, poolclass=NullPool)
    opts: dict[str, Any] = {}
    if engine.dialect.name == "sqlite":
        database = make_url(url).database
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)

        # pysqlite runs DDL outside any transaction. Take BEGIN over from it so that an upgrade
        # that fails halfway leaves the file as it was: SQLite's DDL is transactional.
        @event.listens_for(engine, "connect")
        def _no_driver_transactions(dbapi_connection: Any, _: Any) -> None:
            dbapi_connection.isolation_level = None

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN")

        opts["transactional_ddl"] = True

    try:
        with engine.connect() as connection:
            _run(connection, **opts)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
