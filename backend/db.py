"""The metadata database: engine and session factory for a URL (SQLite or PostgreSQL).

The database holds the control plane's records and mirrors of checkpoint metadata, never
the only copy of state (DESIGN.md §2). Schema changes go through Alembic (`backend/migrations/`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, MetaData, create_engine, event
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker


class Base(DeclarativeBase):
    # Deterministic constraint names, the same on SQLite and PostgreSQL, so a migration can
    # name the constraint it alters or drops (SQLite's batch mode needs the name).
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


# At least as many connections as the API's worker threads (anyio's default limiter: 40), so
# threads never wait for a connection held by a request that waits for a thread.
_POOL = {"pool_size": 10, "max_overflow": 40, "pool_timeout": 30}


def make_engine(url: str, **kw: Any) -> Engine:
    if url.startswith("sqlite"):
        # The API, the worker and the Spark driver share the file: WAL lets readers go on
        # while one writes, and the busy timeout turns lock contention into waiting.
        engine = create_engine(
            url,
            connect_args={"timeout": 30, "check_same_thread": False},
            **(_POOL if url not in ("sqlite://", "sqlite:///:memory:") else {}),
            **kw,
        )

        @event.listens_for(engine, "connect")
        def _pragmas(conn: Any, _: Any) -> None:
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, **_POOL, **kw)


class Database:
    """An engine and its session factory; `session()` commits on success."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self.sessions() as s:
            try:
                yield s
                s.commit()
            except BaseException:
                s.rollback()
                raise

    def dispose(self) -> None:
        self.engine.dispose()


__all__ = ["Base", "Database", "make_engine"]
