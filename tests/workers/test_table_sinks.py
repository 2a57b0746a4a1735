"""Sinks that keep a view in an external table (Postgres `changes` and `table` modes, Delta
Lake `append` and `table` modes), against a plain-Python model of the view: through random
inserts, updates and deletes, rollbacks to earlier steps and reopened sinks, each table
holds the view integrated up to the last step written."""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from pipeline_spec.model import DeltaSink as DeltaSpec
from pipeline_spec.model import PostgresSink as PgSpec
from storage_engine.schema import WEIGHT
from workers.delta_sink import STEP_COLUMN, DeltaSink, storage_options
from workers.postgres_sinks import PostgresSink, PostgresTableSink, SinkConflictError, SinkError
from workers.sinks import Sink

SCHEMA = pa.schema(
    [
        ("user", pa.string()),
        ("day", pa.timestamp("us", tz="UTC")),
        ("n", pa.int64()),
        ("mean", pa.float64()),
        ("note", pa.string()),
    ]
)
KEY = ["user", "day"]
DAY = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
Row = tuple[Any, ...]


def delta(changes: list[tuple[Row, int]]) -> pa.Table:
    cols = list(zip(*(row for row, _ in changes), strict=True)) or [()] * len(SCHEMA)
    arrays = {f.name: pa.array(list(c), f.type) for f, c in zip(SCHEMA, cols, strict=True)}
    return pa.table({**arrays, WEIGHT: pa.array([w for _, w in changes], pa.int64())})


def _norm(row: Row) -> Row:
    return tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in row)


class Target:
    """One sink kind: how to open it and how to read back the view it holds."""

    def __init__(self, kind: str, where: str, tmp: Path) -> None:
        self.kind, self.where, self.tmp = kind, where, tmp

    def open(self, pipeline: str = "pipe", key: list[str] | None = None) -> Sink:
        key = KEY if key is None else key
        if self.kind.startswith("postgres"):
            mode = self.kind.split("-")[1]
            spec = PgSpec(
                name="s",
                kind="postgres",
                **{"from": "v"},
                dsn=self.where,
                table="current",
                mode=mode,
                key=key if mode == "table" else [],
            )
            return (
                PostgresTableSink(spec, SCHEMA, pipeline)
                if mode == "table"
                else (PostgresSink(spec, SCHEMA, pipeline))
            )
        mode = self.kind.split("-")[1]
        dspec = DeltaSpec(
            name="s",
            kind="delta",
            **{"from": "v"},
            path=self.where,
            mode=mode,
            key=key if mode == "table" else [],
        )
        return DeltaSink(dspec, SCHEMA, pipeline, str(self.tmp))

    def delta_table(self) -> DeltaTable:
        if self.where.startswith("s3://"):
            return DeltaTable(self.where, storage_options=storage_options(self.where))
        return DeltaTable(str(self.tmp / self.where))

    def rows(self) -> Counter[Row]:
        """The view the target holds, integrated where it keeps changes."""
        names = ", ".join(f'"{c}"' for c in SCHEMA.names)
        out: Counter[Row] = Counter()
        if self.kind == "postgres-table":
            with psycopg.connect(self.where) as c:
                out.update(_norm(r) for r in c.execute(f"SELECT {names} FROM current"))
        elif self.kind == "postgres-changes":
            with psycopg.connect(self.where) as c:
                for *r, w in c.execute(f"SELECT {names}, weight FROM current"):
                    out[_norm(tuple(r))] += w
        else:
            table = self.delta_table().to_pyarrow_table()
            weights = table[WEIGHT].to_pylist() if self.kind == "delta-append" else None
            for i, r in enumerate(table.select(SCHEMA.names).to_pylist()):
                out[_norm(tuple(r.values()))] += 1 if weights is None else weights[i]
        return +out


KINDS = ["postgres-table", "postgres-changes", "delta-table", "delta-append"]


@pytest.fixture(params=[*KINDS, "delta-table-s3"])
def target(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Target]:
    kind = request.param
    if kind.startswith("postgres"):
        yield Target(kind, request.getfixturevalue("pg_dsn"), tmp_path)
    elif kind.endswith("-s3"):
        # A Delta table on a real S3 server (SeaweedFS), with the object store's settings.
        server = request.getfixturevalue("s3_server")
        bucket = request.getfixturevalue("s3_bucket")
        monkeypatch.setenv("SPINDLE_S3_ENDPOINT", server.endpoint)
        monkeypatch.setenv("SPINDLE_S3_ACCESS_KEY", server.access_key)
        monkeypatch.setenv("SPINDLE_S3_SECRET_KEY", server.secret_key)
        yield Target(kind.removesuffix("-s3"), f"s3://{bucket}/lake/current", tmp_path)
    else:
        yield Target(kind, "table", tmp_path)


def test_the_table_equals_the_integrated_view_through_rollbacks(target: Target) -> None:
    """Random updates, inserts and deletes of a keyed view (a timestamp in the key, NaN,
    infinity and NULL among the values), with rollbacks to random earlier steps and
    reopened sinks, checked against the model after every step."""
    rng = random.Random(31)
    sink = target.open()
    sink.rollback(0)
    history: list[dict[Row, Row]] = [{}]  # the view after each step, by key
    step = 0
    for _ in range(30):
        if step > 2 and rng.random() < 0.15:
            step = rng.randint(max(0, step - 5), step - 1)
            if rng.random() < 0.5:
                sink.close()
                sink = target.open()
            sink.rollback(step)
            del history[step + 1 :]
            assert target.rows() == Counter(_norm(r) for r in history[step].values()), step
            continue
        view = dict(history[step])
        changes: list[tuple[Row, int]] = []
        for _ in range(rng.randint(0, 6)):
            key = (rng.choice("abcdefgh"), DAY + dt.timedelta(days=rng.randint(0, 2)))
            old = view.pop(key, None)
            if old is not None:
                changes.append((old, -1))
            if old is None or rng.random() < 0.7:
                mean = rng.choice([0.5, float("nan"), float("inf"), rng.random()])
                new = (*key, rng.randint(1, 9), mean, rng.choice([None, "x", "é"]))
                view[key] = new
                changes.append((new, 1))
        step += 1
        sink.write(step, delta(changes))
        history.append(view)
        assert target.rows() == Counter(_norm(r) for r in view.values()), step
    sink.forget_through(step - 1)
    sink.close()


@pytest.mark.parametrize("kind", ["postgres-table", "delta-table"])
def test_rows_that_break_the_key_fail_the_step_and_write_nothing(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two rows of one key, or a row twice, fail the step naming the sink, the table and
    the key; the table is left as it was. Postgres also refuses a NULL key and the
    retraction of a row it does not hold (a Delta merge cannot tell)."""
    where = request.getfixturevalue("pg_dsn") if kind.startswith("postgres") else "table"
    target = Target(kind, where, tmp_path)
    sink = target.open()
    sink.write(1, delta([(("a", DAY, 1, 0.5, None), 1)]))
    bad: dict[str, list[tuple[Row, int]]] = {
        "two rows": [(("b", DAY, 2, 0.5, None), 1), (("b", DAY, 3, 0.5, None), 1)],
        "twice": [(("b", DAY, 2, 0.5, None), 2)],
    }
    if kind == "postgres-table":
        bad["null key"] = [((None, DAY, 2, 0.5, None), 1)]
        bad["not there"] = [(("c", DAY, 2, 0.5, None), -1)]
        bad["two rows"] = [(("a", DAY, 2, 0.5, None), 1)]  # the table holds the other
    for why, changes in bad.items():
        with pytest.raises(SinkError, match=r"sink 's', step 2") as e:
            sink.write(2, delta(changes))
        assert "'b'" in str(e.value) or "'c'" in str(e.value) or why in ("null key", "two rows")
        assert target.rows() == Counter([("a", DAY, 1, 0.5, None)]), why
    with pytest.raises(ValueError, match=r"key column.*nope"):
        target.open(key=["user", "nope"])
    sink.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_table_has_one_writing_sink(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = request.getfixturevalue("pg_dsn") if kind.startswith("postgres") else "table"
    target = Target(kind, where, tmp_path)
    sink = target.open("pipe-a")
    sink.write(1, delta([(("a", DAY, 1, 0.5, None), 1)]))
    sink.close()
    with pytest.raises(SinkConflictError, match="pipe-a/s"):
        target.open("pipe-b")
    target.open("pipe-a").close()


def test_a_delta_step_carries_its_transaction_id_and_a_replay_is_skipped(tmp_path: Path) -> None:
    """A reader (or a restarted run) tells the last step written from Delta's application
    transaction; writing a committed step again adds no commit."""
    target = Target("delta-append", "table", tmp_path)
    sink = target.open()
    rows = delta([(("a", DAY, 1, 0.5, None), 1)])
    sink.write(1, rows)
    table = DeltaTable(str(tmp_path / "table"))
    assert table.transaction_version("spindle:pipe/s") == 1
    version = table.version()
    sink.write(1, rows)
    assert DeltaTable(str(tmp_path / "table")).version() == version
    assert DeltaTable(str(tmp_path / "table")).to_pyarrow_table()[STEP_COLUMN].to_pylist() == [1]
    sink.rollback(0)
    table = DeltaTable(str(tmp_path / "table"))
    assert table.transaction_version("spindle:pipe/s") == 0
    assert table.to_pyarrow_table().num_rows == 0
    assert [h["operation"] for h in table.history()][:2] == ["RESTORE", "WRITE"]
