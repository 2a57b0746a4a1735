"""The migrations, on SQLite and PostgreSQL: upgrade and downgrade both work, and the schema
they build is the one backend/models.py declares (the drift check: a model change without a
revision fails here)."""

from __future__ import annotations

import datetime as dt
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.pool import NullPool

import backend.models  # noqa: F401  (registers every table on Base.metadata)
from backend import migrate
from backend.db import Base


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'spindle.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    e = sa.create_engine(db_url, poolclass=NullPool)
    yield e
    e.dispose()


def tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def drift(engine: sa.Engine, metadata: sa.MetaData = Base.metadata) -> list[Any]:
    """What `alembic revision --autogenerate` would put in a new revision (env.py's options)."""
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "target_metadata": metadata}
        )
        return list(compare_metadata(context, metadata))


HEAD = migrate.head()
MODEL_TABLES = set(Base.metadata.tables)
ROOT = Path(__file__).resolve().parents[2]


def test_the_code_needs_no_alembic_ini() -> None:
    """An installed Spindle has no alembic.ini: the code's configuration reads no file, and
    the checkout's alembic.ini (for the `alembic` command) names the same revisions."""
    assert migrate.alembic_config("sqlite://").config_file_name is None
    assert migrate.MIGRATIONS == ROOT / "backend" / "migrations"
    script_location = Config(str(ROOT / "alembic.ini")).get_main_option("script_location")
    assert script_location is not None
    assert Path(script_location).resolve() == migrate.MIGRATIONS


def test_one_head() -> None:
    """Two revisions written in parallel on the same parent must be merged before landing."""
    script = ScriptDirectory.from_config(migrate.alembic_config("sqlite://"))
    assert script.get_heads() == [HEAD]
    assert HEAD is not None


def test_upgrade_downgrade_upgrade(db_url: str, engine: sa.Engine) -> None:
    assert migrate.current(db_url) is None

    migrate.upgrade(db_url)
    assert migrate.current(db_url) == HEAD
    assert tables(engine) == MODEL_TABLES | {"alembic_version"}
    assert drift(engine) == []

    migrate.downgrade(db_url, "base")
    assert migrate.current(db_url) is None
    assert tables(engine) <= {"alembic_version"}

    migrate.upgrade(db_url)
    assert migrate.current(db_url) == HEAD
    assert tables(engine) == MODEL_TABLES | {"alembic_version"}
    assert drift(engine) == []


def test_upgrade_on_a_given_connection(db_url: str, engine: sa.Engine) -> None:
    """env.py uses a connection handed in through config.attributes (in its transaction)."""
    cfg = migrate.alembic_config("postgresql+psycopg://nobody@unused/unused")
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    assert migrate.current(db_url) == HEAD
    assert drift(engine) == []


def test_drift_check_sees_a_model_change(db_url: str, engine: sa.Engine) -> None:
    """The comparison is not vacuous: a column added or retyped in the models shows up."""
    migrate.upgrade(db_url)
    changed = sa.MetaData(naming_convention=Base.metadata.naming_convention)
    for t in Base.metadata.tables.values():
        t.to_metadata(changed)
    changed.tables["pipelines"].append_column(sa.Column("owner", sa.String(64)))
    changed.tables["runs"].c.host.type = sa.String(512)

    # add_column: (op, schema, table, Column); modify_type, one per list: (op, schema, table,
    # column name, ...).
    ops = [d if isinstance(d, tuple) else d[0] for d in drift(engine, changed)]
    assert {(o[0], o[2], getattr(o[3], "name", o[3])) for o in ops} == {
        ("add_column", "pipelines", "owner"),
        ("modify_type", "runs", "host"),
    }


def enum_columns() -> list[tuple[str, sa.Column[Any], sa.Enum]]:
    return [
        (t.name, c, c.type)
        for t in Base.metadata.sorted_tables
        for c in t.columns
        if isinstance(c.type, sa.Enum)
    ]


def test_enum_columns_are_checked(db_url: str, engine: sa.Engine) -> None:
    """Every enum column has a CHECK constraint listing exactly the model's values (which
    autogenerate does not compare: adding a value to a model enum needs a revision)."""
    migrate.upgrade(db_url)
    inspector = sa.inspect(engine)
    assert enum_columns()
    for table, column, enum in enum_columns():
        checks = {c["name"]: c["sqltext"] for c in inspector.get_check_constraints(table)}
        name = f"ck_{table}_{enum.name}"
        assert name in checks, (table, column.name, sorted(map(str, checks)))
        assert column.name in checks[name]
        assert set(re.findall(r"'([^']*)'", checks[name])) == set(enum.enums), name

    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO pipelines (name, description, spec, desired_state, state,"
                " created_at, updated_at) VALUES ('p', '', '{}', 'running', 'bogus',"
                " CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            )
        )


PIPELINES = sa.table(
    "pipelines",
    *(sa.column(c) for c in ("id", "name", "description", "desired_state", "state")),
    sa.column("spec", sa.JSON()),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("updated_at", sa.DateTime(timezone=True)),
)
CHECKPOINTS = sa.table(
    "checkpoints",
    *(sa.column(c) for c in ("pipeline_id", "uuid", "step", "source_offset")),
    *(sa.column(c) for c in ("size_bytes", "new_bytes", "duration_ms")),
    *(sa.column(c) for c in ("local_durable", "remote_durable", "pinned")),
    sa.column("source_offsets", sa.JSON(none_as_null=True)),
    sa.column("created_at", sa.DateTime(timezone=True)),
)
# The first input table, as specs give it: `source` or the first of `tables`, named or not.
FIRST_TABLES = {
    1: {"source": {"kind": "datagen", "table": "clicks"}},
    2: {"source": {"kind": "datagen"}},
    3: {"tables": [{"kind": "kafka", "table": "orders"}, {"kind": "log", "table": "x"}]},
    4: {"tables": [{"kind": "datagen"}]},
}
KAFKA = {"orders": {"t:0": 3, "t:1": 4}, "x": 2}
# (uuid, pipeline, source_offset and source_offsets before 0010, source_offsets after it).
OFFSET_ROWS = [
    ("one-source", 1, 7, None, {"clicks": 7}),
    ("unnamed", 2, 3, None, {"input": 3}),
    ("both", 3, 7, KAFKA, KAFKA),
    ("tables", 4, 5, None, {"input": 5}),
    ("none", 4, None, None, None),
]


def test_checkpoint_offsets_are_kept_once_per_table(db_url: str, engine: sa.Engine) -> None:
    """0010 drops `checkpoints.source_offset`: a row holding only it (mirrored from a
    checkpoint of a one-source release) gets it as its pipeline's first table's offset, as
    the runtime reads such a checkpoint. The downgrade puts back the first table's offset
    as one number (a Kafka table's: its partitions' sum)."""
    migrate.upgrade(db_url, "0009")
    now = dt.datetime.now(dt.UTC)
    with engine.begin() as conn:
        for pid, first in FIRST_TABLES.items():
            spec = {"name": f"p{pid}", **first}
            conn.execute(
                PIPELINES.insert().values(
                    id=pid, name=f"p{pid}", description="", desired_state="stopped",
                    state="stopped", spec=spec, created_at=now, updated_at=now,
                )
            )  # fmt: skip
        for uuid, pid, offset, offsets, _ in OFFSET_ROWS:
            conn.execute(
                CHECKPOINTS.insert().values(
                    pipeline_id=pid, uuid=uuid, step=1, source_offset=offset,
                    source_offsets=offsets, size_bytes=0, new_bytes=0, duration_ms=0.0,
                    local_durable=True, remote_durable=False, pinned=False, created_at=now,
                )
            )  # fmt: skip

    def column(name: str) -> dict[str, Any]:
        with engine.connect() as conn:
            got = conn.execute(sa.select(CHECKPOINTS.c.uuid, CHECKPOINTS.c[name]))
            return {uuid: value for uuid, value in got}

    migrate.upgrade(db_url)
    assert "source_offset" not in {c["name"] for c in sa.inspect(engine).get_columns("checkpoints")}
    assert column("source_offsets") == {uuid: after for uuid, *_, after in OFFSET_ROWS}
    migrate.downgrade(db_url, "0009")
    assert column("source_offset") == {uuid: offset for uuid, _, offset, *_ in OFFSET_ROWS}


@pytest.mark.parametrize("url", ["sqlite:///unused.db", "postgresql+psycopg://u@h/unused"])
def test_offline_sql(url: str) -> None:
    """`alembic upgrade --sql` (for a DBA to review or run) works on both dialects."""
    cfg = migrate.alembic_config(url)
    cfg.output_buffer = out = io.StringIO()
    command.upgrade(cfg, "head", sql=True)
    command.downgrade(cfg, f"{HEAD}:base", sql=True)
    text = out.getvalue()
    for table in MODEL_TABLES:
        assert f"CREATE TABLE {table} " in text
        assert f"DROP TABLE {table};" in text
