"""Sinks that keep a view in an external table (Postgres `changes` and `table` modes, Delta
Lake `append` and `table` modes), against a plain-Python model of the view: through random
inserts, updates and deletes, rollbacks to earlier steps and reopened sinks, each table
holds the view integrated up to the last step written."""

from __future__ import annotations

import datetime as dt
import math
import random
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from pipeline_spec.model import DeltaSink as DeltaSpec
from pipeline_spec.model import PostgresSink as PgSpec
from storage_engine.schema import WEIGHT
from workers.runtime.connectors.delta_sink import STEP_COLUMN, DeltaSink, storage_options
from workers.runtime.connectors.postgres_sink import PostgresSink, PostgresTableSink
from workers.runtime.connectors.sink import Sink, SinkConflictError, SinkError

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


# Decimals in the key and among the values: Postgres numeric(p, s), Delta decimal(p, s).
DECIMAL_SCHEMA = pa.schema(
    [
        ("user", pa.string()),
        ("price", pa.decimal128(12, 2)),
        ("amount", pa.decimal128(38, 10)),
        ("share", pa.decimal128(5, 5)),
    ]
)
DECIMAL_KEY = ["user", "price"]


def delta(changes: list[tuple[Row, int]], schema: pa.Schema = SCHEMA) -> pa.Table:
    cols = list(zip(*(row for row, _ in changes), strict=True)) or [()] * len(schema)
    arrays = {f.name: pa.array(list(c), f.type) for f, c in zip(schema, cols, strict=True)}
    return pa.table({**arrays, WEIGHT: pa.array([w for _, w in changes], pa.int64())})


def _norm(row: Row) -> Row:
    return tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in row)


class Target:
    """One sink kind: how to open it and how to read back the view it holds."""

    def __init__(
        self, kind: str, where: str, tmp: Path, schema: pa.Schema = SCHEMA, key: list[str] = KEY
    ) -> None:
        self.kind, self.where, self.tmp = kind, where, tmp
        self.schema, self.key = schema, key

    def open(self, pipeline: str = "pipe", key: list[str] | None = None) -> Sink:
        key = self.key if key is None else key
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
                PostgresTableSink(spec, self.schema, pipeline)
                if mode == "table"
                else (PostgresSink(spec, self.schema, pipeline))
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
        return DeltaSink(dspec, self.schema, pipeline, str(self.tmp))

    def delta_table(self) -> DeltaTable:
        if self.where.startswith("s3://"):
            return DeltaTable(self.where, storage_options=storage_options(self.where))
        return DeltaTable(str(self.tmp / self.where))

    def rows(self) -> Counter[Row]:
        """The view the target holds, integrated where it keeps changes."""
        names = ", ".join(f'"{c}"' for c in self.schema.names)
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
            for i, r in enumerate(table.select(self.schema.names).to_pylist()):
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

    def row(rng: random.Random) -> tuple[Row, Row]:
        key = (rng.choice("abcdefgh"), DAY + dt.timedelta(days=rng.randint(0, 2)))
        mean = rng.choice([0.5, float("nan"), float("inf"), rng.random()])
        return key, (*key, rng.randint(1, 9), mean, rng.choice([None, "x", "é"]))

    _check_through_rollbacks(target, row)


def test_decimals_keep_every_digit_through_rollbacks(target: Target) -> None:
    """The same with decimal columns, one in the key, values at their types' limits: the
    tables hold them exactly (Postgres `changes` and `table` modes as numeric(p, s), the
    undo log's JSON included; Delta as decimal(p, s))."""
    target = Target(target.kind, target.where, target.tmp, DECIMAL_SCHEMA, DECIMAL_KEY)
    amounts = [Decimal("9" * 28 + "." + "9" * 10), Decimal("-0.0000000001"), Decimal(0), None]

    def row(rng: random.Random) -> tuple[Row, Row]:
        key = (rng.choice("abcd"), rng.choice([Decimal("1.50"), Decimal("-9999999999.99")]))
        amount = rng.choice([*amounts, Decimal(rng.randint(-(10**20), 10**20)).scaleb(-10)])
        return key, (*key, amount, rng.choice([Decimal("0.00001"), Decimal("-0.99999"), None]))

    _check_through_rollbacks(target, row)
    if target.kind.startswith("postgres"):
        with psycopg.connect(target.where) as c:
            types = c.execute(
                "SELECT column_name, numeric_precision, numeric_scale FROM "
                "information_schema.columns WHERE table_name = 'current' AND "
                "data_type = 'numeric' ORDER BY ordinal_position"
            ).fetchall()
        assert types == [("price", 12, 2), ("amount", 38, 10), ("share", 5, 5)]
    else:
        stored = target.delta_table().schema().to_arrow()
        assert [stored.field(c).type for c in ("price", "amount", "share")] == [
            pa.decimal128(12, 2),
            pa.decimal128(38, 10),
            pa.decimal128(5, 5),
        ]


def _check_through_rollbacks(
    target: Target, row: Callable[[random.Random], tuple[Row, Row]]
) -> None:
    """30 steps of random changes of `row(rng)`s (key, row), with rollbacks to random
    earlier steps and reopened sinks, the table checked against the model after each."""
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
            key, new = row(rng)
            old = view.pop(key, None)
            if old is not None:
                changes.append((old, -1))
            if old is None or rng.random() < 0.7:
                view[key] = new
                changes.append((new, 1))
        step += 1
        sink.write(step, delta(changes, target.schema))
        history.append(view)
        assert target.rows() == Counter(_norm(r) for r in view.values()), step
    sink.forget_through(step - 1)
    sink.close()


def test_a_postgres_table_too_narrow_for_a_decimal_is_refused(pg_dsn: str, tmp_path: Path) -> None:
    """An existing table whose numeric column would round or overflow the view's decimals
    (Postgres rounds to a column's scale silently) is refused when the sink opens; a wider
    or unconstrained numeric is taken."""
    target = Target("postgres-table", pg_dsn, tmp_path, DECIMAL_SCHEMA, DECIMAL_KEY)
    for column, ok in [
        ("numeric(12,1)", False),
        ("numeric(11,2)", False),
        ("double precision", False),
        ("numeric(20,4)", True),
        ("numeric", True),
    ]:
        with psycopg.connect(pg_dsn, autocommit=True) as c:
            c.execute("DROP TABLE IF EXISTS current")
            c.execute(
                f'CREATE TABLE current ("user" text, price {column}, amount numeric(38,10), '
                'share numeric(5,5), PRIMARY KEY ("user", price))'
            )
        if ok:
            target.open().close()
            continue
        with pytest.raises(SinkError, match=r"column 'price' .* numeric\(12,2\) or wider"):
            target.open()


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
